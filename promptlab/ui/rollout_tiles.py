"""The Experiments page's rollout: where a guarded rollout is (state, stage, units per
arm) and a tile per guardrail with the variant's difference and its confidence sequence,
as the server last judged it, and each one over the checks so far (a band over time,
views/rollout_charts.py); pause, resume and abort beside them. What the numbers
mean is docs/how-to/rollouts.md; they come from `wb.rollouts.status`.
"""

from __future__ import annotations

import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.experiments import ExperimentConfig
from promptlab.facades.rollouts import GuardrailRow, RolloutStatus
from promptlab.ui.confirm import ask, confirmed, pending
from promptlab.workbench import Workbench

#: How each state reads, and its colour (Streamlit's badge colours).
_STATES = {
    "running": ("running", "blue"),
    "paused": ("paused", "orange"),
    "held": ("held at its stage", "orange"),
    "killed": ("killed: every unit to control", "red"),
    "complete": ("complete", "green"),
    "aborted": ("aborted: every unit to control", "red"),
}


def rollout_tiles(wb: Workbench, config: ExperimentConfig) -> None:
    """The chosen experiment's rollout, when it has one."""
    if config.rollout is None:
        return
    status = wb.rollouts.status(config.name)
    label, colour = _STATES.get(status.state, (status.state, "gray"))
    st.markdown(f"**Rollout of {status.variant}** :{colour}-badge[{label}]")
    stage = (
        "off its stages" if status.stage is None else f"{status.stage + 1} of {len(status.stages)}"
    )
    columns = st.columns(4)
    columns[0].metric("Stage", stage, help=" → ".join(f"{s:g}%" for s in status.stages))
    columns[1].metric("Ramp", f"{status.ramp:g}%")
    columns[2].metric(
        "Units (control / variant)", f"{status.units_control:,} / {status.units_variant:,}"
    )
    columns[3].metric(
        "This stage", f"{status.stage_units:,} of {status.min_units_per_stage:,}", help="per arm"
    )
    tiles = st.columns(max(1, len(status.guardrails)))
    for tile, row in zip(tiles, status.guardrails, strict=False):
        with tile.container(border=True):
            _tile(row)
    if status.last_action:
        st.caption(f"Last decision: {status.last_action}: {status.reason}")
    _over_time(status)
    _controls(wb, status)


def _over_time(status: RolloutStatus) -> None:
    """Each guardrail's difference and confidence sequence at every kept check, with
    the margin it is killed beyond: how it got to where the tile says it is."""
    judged = [row for row in status.guardrails if row.history]
    if not judged:
        return
    from promptlab.views.rollout_charts import guardrail_figure

    with st.expander(f"Guardrails over time ({len(judged[0].history)} checks)"):
        for row in judged:
            st.plotly_chart(
                guardrail_figure(row.metric, row.worse_by, row.history),
                width="stretch",
                key=f"rollout_history_{status.experiment}_{row.metric}",
            )


def _tile(row: GuardrailRow) -> None:
    """One guardrail: the difference, its interval, and whether it regressed."""
    if row.effect is None or row.low is None or row.high is None:
        st.metric(row.metric, "not judged yet", help=row.line)
        return
    scale, unit = (1.0, " ms") if row.metric == "latency_p90_ms" else (100.0, " pts")
    st.metric(
        row.metric,
        f"{row.effect * scale:+.1f}{unit}",
        help=row.line,
        delta="regressed" if row.regressed else "within its margin",
        delta_color="red" if row.regressed else "gray",
        delta_arrow="off",
        # The difference at each check so far: where it is heading, as a line.
        chart_data=[e * scale for e in row.effects] if len(row.effects) > 1 else None,
    )
    st.caption(
        f"CS {row.low * scale:+.1f} to {row.high * scale:+.1f}{unit}; "
        f"margin {row.worse_by * scale:g}{unit}"
    )


def _controls(wb: Workbench, status: RolloutStatus) -> None:
    """Pause, resume, abort: what the state allows."""
    actions = {
        "running": ("pause", "abort"),
        "paused": ("resume", "abort"),
        "held": ("resume", "abort"),
    }.get(status.state, ())
    if not actions:
        return
    columns = st.columns([1] * len(actions) + [8 - len(actions)])
    key = f"rollout::{status.experiment}"
    for column, action in zip(columns, actions, strict=False):
        if column.button(action.capitalize(), key=f"rollout_{action}_{status.experiment}"):
            ask(key, action)
    action = pending(key)
    if action and confirmed(key, _question(status, action), f"Yes, {action}", "Not now"):
        try:
            getattr(wb.rollouts, action)(status.experiment, "from the Experiments page")
        except PromptlabError as exc:
            st.error(str(exc), icon=":material/error:")
        else:
            st.rerun()


def _question(status: RolloutStatus, action: str) -> str:
    """What a pause, resume or abort changes, in words."""
    name = status.experiment
    return {
        "pause": f"Pause the rollout of {name}? It stays at {status.ramp:g}% and is not "
        "checked until resumed.",
        "resume": f"Resume the rollout of {name}? Its guardrails are checked again and "
        "its stages advance.",
        "abort": f"Abort the rollout of {name}? Every unit goes to control (the kill "
        "switch), for good.",
    }[action]
