"""The Compare page's forest figure: each comparison's effect (variant - control) with
its interval (at the look's level, said in the title), its verdict written beside it in
the verdict's colour. It draws a comparison's rows, where views/charts.py draws each
arm's totals, in panels stacked by unit (rates in points, latency in ms) and sized to
their rows; it shares that module's colours, labels and layout, so a variant looks the
same in every figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from promptlab.analysis.stats import Verdict
from promptlab.views.charts import LEGEND, MARGIN, Colours, chart_text, colour_for, error_bars
from promptlab.views.compare import verdict_text

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from promptlab.analysis.stats import MetricComparison

#: The verdict's colour: the forest chart writes each verdict beside its point in it.
VERDICT_COLOURS = {
    Verdict.BETTER: "#1a7f37",
    Verdict.WORSE: "#cf222e",
    Verdict.UNDECIDED: "#57606a",
    Verdict.UNADJUSTED: "#9a6700",
    Verdict.TOO_FEW: "#57606a",
}
#: The forest chart's height per label row, and per panel for its axis (pixels).
FOREST_ROW_PX = 36
FOREST_PANEL_PX = 40
#: Between stacked forest panels: the upper panel's tick labels and axis title.
FOREST_GAP_PX = 70


def forest_chart(
    rows: Sequence[MetricComparison], colours: Colours | None = None, level: str | None = None
) -> go.Figure:
    """Each comparison's effect (variant - control) with its interval (`level`, as
    "96%", in the title), in the variant's colour, its verdict written beside it: rates
    in percentage points (top panel), latency in ms (bottom panel). The panels are
    stacked in one column so their labels share the left margin, which grows to fit
    them; each is as tall as its rows."""
    from plotly.subplots import make_subplots

    panels = [
        (latency, [r for r in rows if r.lower_is_better == latency and r.effect is not None])
        for latency in (False, True)
    ]
    panels = [(latency, picked) for latency, picked in panels if picked] or [(False, [])]
    heights = [FOREST_ROW_PX * max(1, len(picked)) + FOREST_PANEL_PX for _, picked in panels]
    plot_px = sum(heights) + FOREST_GAP_PX * (len(panels) - 1)
    figure = make_subplots(
        rows=len(panels),
        cols=1,
        row_heights=heights,
        vertical_spacing=FOREST_GAP_PX / plot_px if len(panels) > 1 else 0.0,
    )
    order = list(dict.fromkeys([*(colours or {}), *(r.variant for r in rows)]))
    in_legend: set[str] = set()
    for number, (latency, picked) in enumerate(panels, start=1):
        for variant in dict.fromkeys(r.variant for r in picked):
            mine = [r for r in picked if r.variant == variant]
            colour = colour_for(colours, variant, order.index(variant))
            trace = _forest_trace(mine, latency, colour, showlegend=variant not in in_legend)
            figure.add_trace(trace, row=number, col=1)
            in_legend.add(variant)
        unit = "ms (lower is better)" if latency else "pp (higher is better)"
        figure.update_xaxes(title=f"variant - control, {unit}", zeroline=False, row=number, col=1)
        # First row on top, with room above it for its verdict's text.
        rows_shown = len({(r.variant, r.metric) for r in picked})
        figure.update_yaxes(automargin=True, range=[rows_shown - 0.5, -0.9], row=number, col=1)
        figure.add_vline(x=0, line={"color": "#57606a", "dash": "dot"}, row=number, col=1)
    margin = {**MARGIN, "b": 60}
    figure.update_layout(
        title=f"Effect against control ({level or 'with its'} interval)",
        margin=margin,
        legend=LEGEND,
        height=plot_px + margin["t"] + margin["b"] + 40,
    )
    return figure


def _forest_trace(
    rows: Sequence[MetricComparison], latency: bool, colour: str, showlegend: bool
) -> go.Scatter:
    """One variant's points in one panel, each with its interval and its verdict."""
    import plotly.graph_objects as go

    scale = 1.0 if latency else 100.0
    effects = [(r.effect or 0.0) * scale for r in rows]
    # A row without an interval (too few units) gets no bar, not one of zero width.
    ends = [
        (e, r.interval.low * scale, r.interval.high * scale) if r.interval else (e, None, None)
        for r, e in zip(rows, effects, strict=True)
    ]
    name = chart_text(rows[0].variant)
    decided = (Verdict.BETTER, Verdict.WORSE)
    return go.Scatter(
        name=name,
        legendgroup=name,
        showlegend=showlegend,
        x=effects,
        y=[chart_text(f"{r.variant} · {r.metric}") for r in rows],
        mode="markers+text",
        text=[verdict_text(r) for r in rows],
        textposition="top center",
        textfont={"color": [VERDICT_COLOURS[r.verdict] for r in rows], "size": 11},
        marker={
            "color": colour,
            "size": 10,
            "symbol": ["circle" if r.verdict in decided else "circle-open" for r in rows],
        },
        # Plotly draws a missing end as a zero-width bar: none at all without intervals.
        error_x={
            **error_bars(ends),
            "color": colour,
            "visible": any(r.interval is not None for r in rows),
        },
        hovertemplate="%{y}: %{x:+.1f} "
        + ("ms" if latency else "pp")
        + " (%{text})<extra>%{fullData.name}</extra>",
    )
