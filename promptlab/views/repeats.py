"""A run's repeat statistics as the Compare page shows them: a table and a figure with
variance bands (no Streamlit here; records from promptlab/records/repeats.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from promptlab.views.charts import chart_text, colour_map

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from promptlab.records.repeats import RepeatsReport, RowSpread

#: What the figure can draw per row: (label, mean attribute, std attribute, unit).
SPREAD_METRICS: Mapping[str, tuple[str, str, str]] = {
    "latency": ("latency_mean_ms", "latency_std_ms", "latency (ms)"),
    "tokens": ("tokens_mean", "tokens_std", "output tokens"),
}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def repeat_rows(report: RepeatsReport) -> list[dict[str, Any]]:
    """One table row per variant: what its repeats say (None shows as empty, never 0)."""
    return [
        {
            "variant": v.variant,
            "temperature": _round(v.temperature_mean, 2),
            "top_p": _round(v.top_p_mean, 2),
            "rows": v.rows,
            "perplexity": _round(v.perplexity),
            "token consistency (exact)": _round(v.exact_agreement),
            "rows all identical": _round(v.rows_identical),
            "by field": ", ".join(f"{k} {s:.2f}" for k, s in v.field_agreement.items()),
            "completion agreement": _round(v.completion_agreement),
            "latency spread (ms)": _round(v.latency_spread_ms, 1),
            "tokens spread": _round(v.tokens_spread, 2),
        }
        for v in report.variants
    ]


def _band(
    spreads: tuple[RowSpread, ...], mean_attr: str, std_attr: str
) -> tuple[list[int], list[float], list[float], list[float]]:
    """(rows, means, lows, highs) of the rows with a mean; a row's band is mean ± its
    standard deviation across repeats (no band: the mean itself)."""
    xs, means, lows, highs = [], [], [], []
    for s in spreads:
        mean = getattr(s, mean_attr)
        if mean is None:
            continue
        std = getattr(s, std_attr) or 0.0
        xs.append(s.row_index)
        means.append(mean)
        lows.append(mean - std)
        highs.append(mean + std)
    return xs, means, lows, highs


def spread_figure(report: RepeatsReport, metric: str = "latency") -> go.Figure:
    """Per variant, each row's mean over its repeats (a line) inside a band of ± the
    standard deviation across those repeats: how far one repeat may land from another."""
    import plotly.graph_objects as go

    mean_attr, std_attr, unit = SPREAD_METRICS[metric]
    colours = colour_map(v.variant for v in report.variants)
    fig = go.Figure()
    for v in report.variants:
        xs, means, lows, highs = _band(v.spreads, mean_attr, std_attr)
        if not xs:
            continue
        name, colour = chart_text(v.variant), colours[v.variant]
        fig.add_trace(
            go.Scatter(
                x=xs + xs[::-1],
                y=highs + lows[::-1],
                fill="toself",
                fillcolor=colour,
                opacity=0.2,
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
                name=f"{name} ± sd",
                legendgroup=name,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=means,
                mode="lines+markers",
                name=name,
                legendgroup=name,
                line={"color": colour},
                marker={"color": colour, "size": 4},
            )
        )
    fig.update_layout(
        title=f"{unit} per row: mean over {report.repeats} repeats, band ± sd across them",
        xaxis_title="dataset row",
        yaxis_title=unit,
        legend_title="variant",
    )
    return fig
