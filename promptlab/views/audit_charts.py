"""The Audit page's figure: an item's trace on a time axis (no Streamlit here).

One horizontal bar per wait, attempt and the result, from `auditview.timeline_bars`,
placed by `base` on a millisecond axis counted from the trace's first moment (a trace
lasts milliseconds to seconds: a date axis would hide it in one tick).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from promptlab.views.audit import TimelineBar
from promptlab.views.charts import chart_text

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: Bar colours by what a span is (and how an attempt ended).
TIMELINE_COLOURS = {
    "wait": "#d0d7de",
    "ok": "#1a7f37",
    "succeeded": "#1a7f37",
    "error": "#cf222e",
    "failed": "#cf222e",
    "cancelled": "#8c959f",
}
#: A span shorter than this is drawn this wide, so an instant stays visible.
MIN_BAR_MS = 0.5


def trace_timeline_chart(bars: Sequence[TimelineBar]) -> go.Figure:
    import plotly.graph_objects as go

    figure = go.Figure()
    if not bars:
        figure.update_layout(title="No timed events in this trace", height=160)
        return figure
    origin = min(b.start for b in bars)
    labels = [b.label for b in bars]
    starts = [(b.start - origin).total_seconds() * 1000 for b in bars]
    widths = [max((b.end - b.start).total_seconds() * 1000, MIN_BAR_MS) for b in bars]
    colours = [
        TIMELINE_COLOURS["wait"]
        if b.kind == "wait"
        else TIMELINE_COLOURS.get(b.status or "", "#0969da")
        for b in bars
    ]
    figure.add_trace(
        go.Bar(
            y=labels,
            x=widths,
            base=starts,
            orientation="h",
            marker={"color": colours},
            # The detail quotes the provider's error message: text, not Plotly markup.
            customdata=[
                [chart_text(b.detail), b.start.isoformat(timespec="milliseconds")] for b in bars
            ],
            hovertemplate="%{customdata[0]}<br>from %{customdata[1]}, %{x:.0f} ms<extra></extra>",
            showlegend=False,
        )
    )
    figure.update_layout(
        title="Timeline",
        height=120 + 34 * len(bars),
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        xaxis_title=f"ms after {origin.isoformat(timespec='milliseconds')}",
        yaxis={"autorange": "reversed", "categoryorder": "array", "categoryarray": labels},
        bargap=0.35,
    )
    return figure
