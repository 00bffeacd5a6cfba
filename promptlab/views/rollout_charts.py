"""A guardrail's difference over a rollout's checks, as the Experiments page draws it
(no Streamlit here): the variant minus control at each check, its confidence sequence
as a band, zero, and the margin the rule kills beyond (`worse_by`, on the worse side:
above for error rate and latency, below for CTR). A regression is the whole band past
the margin line. The points are the rollout's kept checks (store/rollouts.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: One check of a guardrail: when, the difference, and its confidence sequence.
Look = tuple[datetime, float, float, float]
#: How each guardrail's figures read: the scale to its unit, the unit, which way is worse.
UNITS = {
    "error_rate": (100.0, "points", "higher is worse"),
    "ctr": (100.0, "points", "lower is worse"),
    "latency_p90_ms": (1.0, "ms", "higher is worse"),
}
BAND = "rgba(31, 119, 180, 0.18)"
LINE = "#1f77b4"
MARGIN = "#d62728"


def guardrail_figure(metric: str, worse_by: float, looks: Sequence[Look]) -> go.Figure:
    """The difference and its band at each check, with zero and the margin drawn."""
    import plotly.graph_objects as go

    scale, unit, worse = UNITS.get(metric, (1.0, "", "higher is worse"))
    at = [look[0] for look in looks]
    effect = [look[1] * scale for look in looks]
    low = [look[2] * scale for look in looks]
    high = [look[3] * scale for look in looks]
    margin = (-worse_by if worse == "lower is worse" else worse_by) * scale
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=at, y=high, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip"
        )
    )
    figure.add_trace(
        go.Scatter(
            x=at,
            y=low,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=BAND,
            name="confidence sequence",
        )
    )
    figure.add_trace(
        go.Scatter(x=at, y=effect, mode="lines+markers", line={"color": LINE}, name="difference")
    )
    figure.add_hline(y=0, line={"color": "gray", "width": 1})
    figure.add_hline(
        y=margin,
        line={"color": MARGIN, "dash": "dash"},
        annotation_text=f"margin {margin:+g} {unit}",
        annotation_position="top left",
    )
    figure.update_layout(
        title=f"{metric}: variant minus control",
        yaxis_title=f"{unit}, {worse}",
        height=260,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.3},
    )
    return figure
