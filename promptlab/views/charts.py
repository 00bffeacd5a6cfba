"""Plotly figures of a comparison: what the Compare page draws (no Streamlit here).

Each builder takes plain records (MetricsRow, TimeSeries, MetricComparison, latency
arrays) and returns a `plotly.graph_objects.Figure`, so a test can read the traces.
Rates carry Wilson 95% intervals as asymmetric error bars. Names (variants, versions)
pass through `chart_text`: Plotly reads `<a href>`, `<b>` and `<br>` in its labels.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from promptlab.analysis.stats import Verdict

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import plotly.graph_objects as go

    from promptlab.analysis.stats import MetricComparison
    from promptlab.records import MetricsRow
    from promptlab.store.timeseries import TimeSeries

#: A rate to plot: (label, rate attribute, interval low, interval high) of a MetricsRow;
#: dotted names reach into a property (`completion_interval.low`).
RateMetric = tuple[str, str, str, str]
RATE_METRICS: tuple[RateMetric, ...] = (
    ("completion rate", "completion_rate", "completion_interval.low", "completion_interval.high"),
    ("CTR", "ctr", "ctr_interval.low", "ctr_interval.high"),
)
#: The latency percentiles drawn per variant: (label, MetricsRow attribute).
LATENCY_PERCENTILES = (
    ("p50", "latency_p50_ms"),
    ("p90", "latency_p90_ms"),
    ("p99", "latency_p99_ms"),
)
VERDICT_COLOURS = {
    Verdict.BETTER: "#1a7f37",
    Verdict.WORSE: "#cf222e",
    Verdict.UNDECIDED: "#8c959f",
}
#: At most this many points per ECDF line: quantiles of a larger sample draw the same.
ECDF_POINTS = 500
_LAYOUT: dict[str, Any] = {
    "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
    "height": 340,
    "legend": {"orientation": "h", "y": -0.15},
}


def chart_text(text: str) -> str:
    """`text` as a Plotly label shows it literally. Legends, ticks and hover labels read
    `<a href=...>` as a live link (and `<b>`, `<br>` as markup): a variant a spec named
    `<a href="http://...">...</a>` would be a link on the Compare page. Plotly decodes
    `&lt;`, `&gt;` and `&amp;` back, not `&quot;`: quotes stay as they are."""
    return html.escape(text, quote=False)


def _get(row: object, name: str) -> Any:
    """The attribute, or None when the row does not carry it (an older record)."""
    try:
        return attrgetter(name)(row)
    except AttributeError:
        return None


def rate_chart(
    rows: Sequence[MetricsRow], metrics: Sequence[RateMetric] = RATE_METRICS
) -> go.Figure:
    """A bar per variant (or version) per rate, with its interval as error bars.

    A metric no row has a value for is left out; a row without one is a gap.
    """
    import plotly.graph_objects as go

    figure = go.Figure()
    labels = [chart_text(r.label) for r in rows]
    for label, rate, low, high in metrics:
        values = [_get(r, rate) for r in rows]
        if all(v is None for v in values):
            continue
        lows = [_get(r, low) for r in rows]
        highs = [_get(r, high) for r in rows]
        plus = [
            None if v is None or h is None else h - v for v, h in zip(values, highs, strict=True)
        ]
        minus = [
            None if v is None or lo is None else v - lo for v, lo in zip(values, lows, strict=True)
        ]
        figure.add_trace(
            go.Bar(
                name=label,
                x=labels,
                y=values,
                error_y={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus},
                hovertemplate="%{x}: %{y:.1%}<extra>" + label + "</extra>",
            )  # fmt: skip
        )
    figure.update_layout(
        title="Rates per variant (95% Wilson interval)", barmode="group",
        yaxis={"tickformat": ".0%", "rangemode": "tozero"}, **_LAYOUT,
    )  # fmt: skip
    return figure


def latency_percentiles_chart(rows: Sequence[MetricsRow]) -> go.Figure:
    """p50, p90 and p99 latency per variant as grouped bars (ms)."""
    import plotly.graph_objects as go

    figure = go.Figure()
    labels = [chart_text(r.label) for r in rows]
    for label, attr in LATENCY_PERCENTILES:
        figure.add_trace(
            go.Bar(
                name=label,
                x=labels,
                y=[_get(r, attr) for r in rows],
                hovertemplate="%{x}: %{y:.0f} ms<extra>" + label + "</extra>",
            )  # fmt: skip
        )
    figure.update_layout(
        title="Latency percentiles (ms)", barmode="group", yaxis={"title": "ms"}, **_LAYOUT
    )
    return figure


def ecdf_points(values: npt.NDArray[np.float64]) -> tuple[list[float], list[float]]:
    """(latency, share of results at or below it), at most ECDF_POINTS points."""
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = ordered.size
    if n == 0:
        return [], []
    if n <= ECDF_POINTS:
        return ordered.tolist(), (np.arange(1, n + 1) / n).tolist()
    shares = np.linspace(1 / ECDF_POINTS, 1.0, ECDF_POINTS)
    return np.quantile(ordered, shares).tolist(), shares.tolist()


def latency_ecdf_chart(samples: Mapping[str, npt.NDArray[np.float64]]) -> go.Figure:
    """One ECDF line per variant: the share of succeeded results within each latency."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for name, values in samples.items():
        xs, ys = ecdf_points(values)
        figure.add_trace(
            go.Scatter(
                name=chart_text(name),
                x=xs,
                y=ys,
                mode="lines",
                line={"shape": "hv"},
                # The name by reference: in the template, `%{...}` in it would be read.
                hovertemplate="%{x:.0f} ms: %{y:.0%}<extra>%{fullData.name}</extra>",
            )  # fmt: skip
        )
    figure.update_layout(
        title="Latency distribution (ECDF)", xaxis={"title": "ms"},
        yaxis={"tickformat": ".0%", "range": [0, 1.02]}, **_LAYOUT,
    )  # fmt: skip
    return figure


def over_time_chart(series: TimeSeries) -> go.Figure:
    """Completion rate (top) and p90 latency (bottom) per variant per time bucket."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
        subplot_titles=("completion rate", "latency p90 (ms)"),
    )  # fmt: skip
    variants = list(dict.fromkeys(b.variant for b in series.buckets))
    for index, variant in enumerate(variants):
        buckets = [b for b in series.buckets if b.variant == variant]
        x = [b.start for b in buckets]
        colour = _palette(index)
        name = chart_text(variant)
        figure.add_trace(
            go.Scatter(name=name, legendgroup=name, x=x, y=[b.completion_rate for b in buckets],
                       mode="lines+markers", line={"color": colour},
                       customdata=[b.finished for b in buckets],
                       hovertemplate="%{y:.1%} of %{customdata}<extra>%{fullData.name}</extra>"),
            row=1, col=1,
        )  # fmt: skip
        figure.add_trace(
            go.Scatter(name=name, legendgroup=name, showlegend=False, x=x,
                       y=[b.latency_p90_ms for b in buckets], mode="lines+markers",
                       line={"color": colour},
                       hovertemplate="%{y:.0f} ms<extra>%{fullData.name}</extra>"),
            row=2, col=1,
        )  # fmt: skip
    figure.update_yaxes(tickformat=".0%", range=[0, 1.05], row=1, col=1)
    layout = {**_LAYOUT, "height": 460, "margin": {**_LAYOUT["margin"], "t": 80}}
    figure.update_layout(title=f"Over time (per {series.unit})", **layout)
    return figure


def forest_chart(rows: Sequence[MetricComparison]) -> go.Figure:
    """Each comparison's effect (variant - control) with its 95% interval, coloured by
    verdict: rates in percentage points (left), latency in ms (right)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.18,
        subplot_titles=("rates: delta (pp)", "latency: delta (ms)"),
    )  # fmt: skip
    shown: set[Verdict] = set()
    for col, latency in ((1, False), (2, True)):
        panel = [r for r in rows if r.lower_is_better == latency and r.effect is not None]
        scale = 1.0 if latency else 100.0
        for verdict, colour in VERDICT_COLOURS.items():
            picked = [r for r in panel if r.verdict == verdict]
            if not picked:
                continue
            effects = [(r.effect or 0.0) * scale for r in picked]
            plus = [
                (r.interval.high * scale - e) if r.interval else 0.0
                for r, e in zip(picked, effects, strict=True)
            ]
            minus = [
                (e - r.interval.low * scale) if r.interval else 0.0
                for r, e in zip(picked, effects, strict=True)
            ]
            figure.add_trace(
                go.Scatter(
                    name=str(verdict), legendgroup=str(verdict), showlegend=verdict not in shown,
                    x=effects, y=[chart_text(f"{r.variant} · {r.metric}") for r in picked],
                    mode="markers",
                    marker={"color": colour, "size": 10},
                    error_x={"type": "data", "symmetric": False, "array": plus,
                             "arrayminus": minus, "color": colour},
                ),
                row=1, col=col,
            )  # fmt: skip
            shown.add(verdict)
        figure.add_vline(x=0, line={"color": "#57606a", "dash": "dot"}, row=1, col=col)
    layout = {**_LAYOUT, "margin": {**_LAYOUT["margin"], "t": 80}}
    figure.update_layout(title="Effect against control (95% interval)", **layout)
    return figure


def _palette(index: int) -> str:
    import plotly.colors

    colours = plotly.colors.qualitative.Plotly
    return str(colours[index % len(colours)])
