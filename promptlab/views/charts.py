"""Plotly figures of a comparison: what the Compare page draws (no Streamlit here).

Each builder takes plain records (MetricsRow, TimeSeries, MetricComparison, latency
arrays) and returns a `plotly.graph_objects.Figure`, so a test can read the traces.
Every builder takes `colours` (name -> colour, from `colour_map`): a page builds it once
so that a variant or version has one colour in every figure. Rates and latency
percentiles carry intervals as asymmetric error bars: the comparison's own (per unit,
at its look's level, given as `level` for the title) when its rows are given as `arms`,
else Wilson's 95% for rates. Axis titles give the
unit and which way is better. Names (variants, versions) pass through `chart_text`:
Plotly reads `<a href>`, `<b>` and `<br>` in its labels. The forest of effects is in
views/forest.py, drawn with the colours, labels and layout defined here.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from promptlab.analysis.intervals import completion_interval, ctr_interval
from promptlab.records.unit_samples import SCORE_PREFIX

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import plotly.graph_objects as go

    from promptlab.analysis.stats import Interval, MetricComparison
    from promptlab.records import LogMetricsRow, MetricsRow

    #: A variant's (MetricsRow) or a version's production-log (LogMetricsRow) totals.
    Totals = MetricsRow | LogMetricsRow
    from promptlab.store.timeseries import TimeBucket, TimeSeries

#: A figure read off a row: an attribute's name (dotted names reach into a property), or
#: a function of the row (an interval's end, computed in analysis/).
RowField = str | Callable[[Any], Any]
#: A rate to plot: (label, rate attribute, interval low, interval high) of a MetricsRow.
#: The label is also the comparison's metric name, whose per-arm interval wins when given.
RateMetric = tuple[str, str, RowField, RowField]
RATE_METRICS: tuple[RateMetric, ...] = (
    (
        "completion rate",
        "completion_rate",
        lambda row: completion_interval(row).low,
        lambda row: completion_interval(row).high,
    ),
    ("CTR", "ctr", lambda row: ctr_interval(row).low, lambda row: ctr_interval(row).high),
)
#: The latency percentiles drawn per variant: (label, MetricsRow attribute, the
#: comparison's metric name).
LATENCY_PERCENTILES = (
    ("p50", "latency_p50_ms", "latency p50"),
    ("p90", "latency_p90_ms", "latency p90"),
    ("p99", "latency_p99_ms", "latency p99"),
)
#: One colour per variant or version, in the order `colour_map` meets them (Tableau 10:
#: distinct, and control's blue and the first variant's orange are told apart by
#: colour-blind readers too).
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#e15759",
)
#: At most this many points per ECDF line: quantiles of a larger sample draw the same.
ECDF_POINTS = 500
#: Axis titles: the unit, and which way is better.
RATE_AXIS = "rate, % (higher is better)"
LATENCY_AXIS = "latency, ms (lower is better)"
#: The figures' margins (pixels): room for a title on top.
MARGIN = {"l": 10, "r": 10, "t": 50, "b": 10}
#: Legends under the figure (container-anchored: never over an axis title).
LEGEND = {"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom", "x": 0}
_LAYOUT: dict[str, Any] = {"margin": {**MARGIN, "b": 60}, "height": 380, "legend": LEGEND}

Colours = Mapping[str, str]


def chart_text(text: str) -> str:
    """`text` as a Plotly label shows it literally. Legends, ticks and hover labels read
    `<a href=...>` as a live link (and `<b>`, `<br>` as markup): a variant a spec named
    `<a href="http://...">...</a>` would be a link on the Compare page. Plotly decodes
    `&lt;`, `&gt;` and `&amp;` back, not `&quot;`: quotes stay as they are."""
    return html.escape(text, quote=False)


def colour_map(names: Iterable[str]) -> dict[str, str]:
    """One colour per name, in first-seen order (control first): build it once per page
    and pass it to every figure, so a name has the same colour in all of them."""
    unique = dict.fromkeys(names)
    return {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(unique)}


def trace_colour(trace: Any) -> str | None:
    """The colour a trace is drawn in: its markers' (bars, points), else its line's."""
    marker = getattr(trace, "marker", None)
    colour = getattr(marker, "color", None)
    if isinstance(colour, str):
        return colour
    line = getattr(trace, "line", None)
    colour = getattr(line, "color", None)
    return colour if isinstance(colour, str) else None


def colour_for(colours: Colours | None, name: str, index: int) -> str:
    """The name's colour in `colours`, else the palette's at the name's index."""
    if colours is not None and name in colours:
        return colours[name]
    return PALETTE[index % len(PALETTE)]


def _get(row: object, field: RowField) -> Any:
    """The field, or None when the row does not carry it (an older record)."""
    try:
        return field(row) if callable(field) else attrgetter(field)(row)
    except AttributeError:
        return None


def arm_estimates(
    arms: Sequence[MetricComparison],
) -> dict[tuple[str, str], tuple[float | None, Interval | None]]:
    """(name, metric) -> (value, interval) of each arm, from a comparison's rows:
    control's from every row, each variant's from its own."""
    found: dict[tuple[str, str], tuple[float | None, Interval | None]] = {}
    for row in arms:
        found[(row.control, row.metric)] = (row.control_value, row.control_interval)
        found[(row.variant, row.metric)] = (row.variant_value, row.variant_interval)
    return found


def error_bars(points: Sequence[tuple[Any, Any, Any]]) -> dict[str, Any]:
    """Asymmetric error bars from (value, low, high); a missing end leaves no bar."""
    plus = [None if v is None or h is None else h - v for v, _, h in points]
    minus = [None if v is None or lo is None else v - lo for v, lo, _ in points]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus}


def _by_label(rows: Sequence[Any]) -> dict[str, Any]:
    """The first row per label: a version run on two models is one arm of a comparison."""
    named: dict[str, Any] = {}
    for row in rows:
        named.setdefault(row.label, row)
    return named


def rate_chart(
    rows: Sequence[Totals],
    metrics: Sequence[RateMetric] = RATE_METRICS,
    colours: Colours | None = None,
    arms: Sequence[MetricComparison] = (),
    level: str = "95%",
) -> go.Figure:
    """A bar per variant (or version) in its colour, grouped by rate, with its interval:
    the comparison's (`arms`, at `level`) where it has the rate, else Wilson's 95%; with
    `arms`, a rate the comparison lacks gets no bar (one level per figure). The
    comparison's scores against expected answers (`score: NAME`) follow the rates.

    A metric no row has a value for is left out; a row without one is a gap.
    """
    import plotly.graph_objects as go

    scores = sorted({r.metric for r in arms if r.metric.startswith(SCORE_PREFIX)})
    metrics = (*metrics, *((name, "", "", "") for name in scores))
    estimates = arm_estimates(arms)
    named = _by_label(rows)
    points: dict[str, list[tuple[Any, Any, Any]]] = {name: [] for name in named}
    shown = []
    for label, rate, low, high in metrics:
        per = {
            name: _rate_point(estimates, (name, label), row, (rate, low, high))
            for name, row in named.items()
        }
        if all(p[0] is None for p in per.values()):
            continue
        shown.append(label)
        for name, point in per.items():
            points[name].append(point)
    figure = go.Figure()
    for index, (name, values) in enumerate(points.items()):
        text = chart_text(name)
        figure.add_trace(
            go.Bar(
                name=text,
                legendgroup=text,
                x=shown,
                y=[v for v, _, _ in values],
                marker={"color": colour_for(colours, name, index)},
                error_y=error_bars(values),
                # The name by reference: in the template, `%{...}` in it would be read.
                hovertemplate="%{x}: %{y:.1%}<extra>%{fullData.name}</extra>",
            )
        )
    kind = f"{level} interval, per unit" if estimates else "95% interval, Wilson"
    figure.update_layout(
        title=f"Rates ({kind})",
        barmode="group",
        yaxis={"tickformat": ".0%", "rangemode": "tozero", "title": RATE_AXIS},
        **_LAYOUT,
    )
    return figure


def _rate_point(
    estimates: Mapping[tuple[str, str], tuple[float | None, Interval | None]],
    name_label: tuple[str, str],
    row: Any,
    fields: tuple[RowField, RowField, RowField],
) -> tuple[Any, Any, Any]:
    """(value, low, high) of one name's rate: the comparison's where it has the rate;
    in a comparison without it, the row's value and no interval (one level per figure);
    else the row's value and Wilson's interval."""
    if name_label in estimates:
        value, interval = estimates[name_label]
        return (value, *((interval.low, interval.high) if interval is not None else (None, None)))
    rate, low, high = fields
    if estimates:
        return (_get(row, rate), None, None)
    return (_get(row, rate), _get(row, low), _get(row, high))


def latency_percentiles_chart(
    rows: Sequence[Totals],
    colours: Colours | None = None,
    arms: Sequence[MetricComparison] = (),
    level: str = "95%",
) -> go.Figure:
    """p50, p90 and p99 latency, a bar per variant in its colour, with the comparison's
    interval of each (`arms`, at `level`; no bar without one)."""
    import plotly.graph_objects as go

    estimates = arm_estimates(arms)
    figure = go.Figure()
    for index, (name, row) in enumerate(_by_label(rows).items()):
        values = []
        for _, attr, metric in LATENCY_PERCENTILES:
            value, interval = estimates.get((name, metric), (None, None))
            if value is None:
                value, interval = _get(row, attr), None
            ends = (interval.low, interval.high) if interval is not None else (None, None)
            values.append((value, *ends))
        text = chart_text(name)
        figure.add_trace(
            go.Bar(
                name=text,
                legendgroup=text,
                x=[p for p, _, _ in LATENCY_PERCENTILES],
                y=[v for v, _, _ in values],
                marker={"color": colour_for(colours, name, index)},
                error_y=error_bars(values),
                hovertemplate="%{x}: %{y:.0f} ms<extra>%{fullData.name}</extra>",
            )
        )
    figure.update_layout(
        title="Latency percentiles" + (f" ({level} interval per unit)" if estimates else ""),
        barmode="group",
        yaxis={"title": LATENCY_AXIS, "rangemode": "tozero"},
        **_LAYOUT,
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


def latency_ecdf_chart(
    samples: Mapping[str, npt.NDArray[np.float64]], colours: Colours | None = None
) -> go.Figure:
    """One ECDF line per variant: the share of requests answered within each latency
    (a line further left, or higher, is faster)."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for index, (name, values) in enumerate(samples.items()):
        xs, ys = ecdf_points(values)
        text = chart_text(name)
        figure.add_trace(
            go.Scatter(
                name=text,
                legendgroup=text,
                x=xs,
                y=ys,
                mode="lines",
                line={"shape": "hv", "color": colour_for(colours, name, index)},
                hovertemplate="%{x:.0f} ms: %{y:.0%}<extra>%{fullData.name}</extra>",
            )
        )
    figure.update_layout(
        title="Latency distribution (ECDF)",
        xaxis={"title": LATENCY_AXIS},
        yaxis={"tickformat": ".0%", "range": [0, 1.02], "title": "share answered within"},
        **_LAYOUT,
    )
    return figure


#: How long each `TimeSeries.unit` bucket is: buckets with one or more empty between
#: them are a pause.
BUCKET_LENGTHS = {
    "second": timedelta(seconds=1),
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
}


def with_gaps(buckets: Sequence[TimeBucket], unit: str) -> list[tuple[datetime, TimeBucket | None]]:
    """One variant's buckets, oldest first, as (time, bucket) points, with a point of no
    bucket (None) one bucket after the last before a pause that left buckets empty:
    Plotly breaks a line at a None, instead of drawing it straight across a stretch with
    no results as if they had been there."""
    length = BUCKET_LENGTHS.get(unit)
    points: list[tuple[datetime, TimeBucket | None]] = []
    for bucket in buckets:
        # Half a bucket of slack: a day across a clock change is 23 or 25 hours long,
        # while a pause leaves at least one whole bucket empty.
        if points and length is not None and bucket.start - points[-1][0] > length * 1.5:
            points.append((points[-1][0] + length, None))
        points.append((bucket.start, bucket))
    return points


def over_time_chart(series: TimeSeries, colours: Colours | None = None) -> go.Figure:
    """Completion rate (top) and p90 latency (bottom) per variant per time bucket; a
    line breaks where a pause left buckets empty (`with_gaps`)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    variants = list(dict.fromkeys(b.variant for b in series.buckets))
    for index, variant in enumerate(variants):
        points = with_gaps([b for b in series.buckets if b.variant == variant], series.unit)
        x = [when for when, _ in points]
        buckets = [bucket for _, bucket in points]
        colour = colour_for(colours, variant, index)
        name = chart_text(variant)
        figure.add_trace(
            go.Scatter(
                name=name,
                legendgroup=name,
                x=x,
                y=[b.completion_rate if b else None for b in buckets],
                mode="lines+markers",
                line={"color": colour},
                connectgaps=False,
                customdata=[b.finished if b else None for b in buckets],
                hovertemplate="%{y:.1%} of %{customdata}<extra>%{fullData.name}</extra>",
            ),
            row=1,
            col=1,
        )
        figure.add_trace(
            go.Scatter(
                name=name,
                legendgroup=name,
                showlegend=False,
                x=x,
                y=[b.latency_p90_ms if b else None for b in buckets],
                mode="lines+markers",
                line={"color": colour},
                connectgaps=False,
                hovertemplate="%{y:.0f} ms<extra>%{fullData.name}</extra>",
            ),
            row=2,
            col=1,
        )
    # Two lines each: a panel is half the figure high, a long rotated title would run
    # past it into the other's.
    figure.update_yaxes(
        tickformat=".0%", range=[0, 1.05], row=1, col=1, title="completion, %<br>(higher is better)"
    )
    figure.update_yaxes(title="p90 latency, ms<br>(lower is better)", row=2, col=1)
    figure.update_layout(title=f"Over time (per {series.unit})", **{**_LAYOUT, "height": 480})
    return figure
