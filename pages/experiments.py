"""Experiments: create one from prompt versions, change its split, launch it on a dataset."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pandas as pd
import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.experiments import ExperimentConfig
from promptlab.ui.confirm import ask, confirmed, pending
from promptlab.ui.experiment_form import create_form
from promptlab.ui.experiment_launch import launch
from promptlab.ui.experiment_revisions import revisions_table, traffic_changes, weights_text
from promptlab.ui.resources import get_workbench
from promptlab.ui.rollout_tiles import rollout_tiles
from promptlab.ui.seen import seen_before
from promptlab.ui.shell import require_shell
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench

POLL_EVERY = timedelta(seconds=1)


def experiments_table(configs: list[ExperimentConfig]) -> None:
    st.dataframe(
        pd.DataFrame(
            {
                "experiment": c.name,
                "revision": c.revision,
                "mode": c.mode,
                "split": " / ".join(f"{v.name} {v.weight:g}" for v in c.variants),
                "control": c.control.name,
                "ramp %": c.ramp,
                "killed": c.killed,
                "changed": c.created_at,
                "by": c.author,
            }
            for c in configs
        ),
        hide_index=True,
        width="stretch",
    )


def change_form(wb: Workbench, config: ExperimentConfig) -> None:
    """Weights and ramp as a new revision; the kill switch asks for a confirmation."""
    st.markdown("**Traffic**")
    # Widget keys carry the experiment and its revision: a widget of another experiment
    # (or of the revision before a save) must never lend its value to this one. The form's
    # key does not: a click on a form shown at an older revision must still arrive, to be
    # refused as made on that revision (the one shown before the click) and not lost.
    rev = f"{config.name}_{config.revision}"
    based_on = seen_before(f"experiment::{config.name}", config.revision)
    # Enter in the Note field must not save a revision: only the button does.
    with st.form(f"change_{config.name}", enter_to_submit=False):
        cols = st.columns(len(config.variants) + 1)
        weights = {
            v.name: cols[i].number_input(
                f"{escape_markdown(v.name)} weight",
                min_value=0.0,
                value=float(v.weight),
                key=f"w_{rev}_{v.name}",
            )
            for i, v in enumerate(config.variants)
        }
        ramp = cols[-1].slider(
            "Ramp %",
            0.0,
            100.0,
            float(config.ramp),
            key=f"ramp_{rev}",
            help="Share of units that enter the experiment; the rest get control. "
            "Raising it only adds units.",
        )
        note = st.text_input("Note", key=f"note_{rev}", placeholder="why this change")
        saved = st.form_submit_button("Save as new revision")
    key = f"traffic::{config.name}"
    if saved and based_on != config.revision:
        # Made on a revision someone has since replaced: refused, naming who and when.
        _update(wb, config.name, (weights, ramp, note, based_on))
    elif saved:
        changes = traffic_changes(config, weights, ramp)
        if changes:
            ask(key, (weights, ramp, note, based_on, changes))
        else:
            st.info("Nothing changed: no revision saved.", icon=":material/info:")
    change = pending(key)
    question = (
        f"Save revision {config.revision + 1} of {config.name}: {'; '.join(change[4])}? "
        "The gateway and exported configs assign units by it from then on."
        if change
        else ""
    )
    if confirmed(key, question, "Yes, save this revision", "Keep it as it is"):
        _update(wb, config.name, change[:4])
    kill_switch(wb, config, based_on)


def _update(wb: Workbench, name: str, change: tuple[Any, ...]) -> None:
    weights, ramp, note, basis = change
    try:
        wb.experiments.update(name, weights=weights, ramp=ramp, note=note, based_on=basis)
    except PromptlabError as exc:
        show_error(exc)
    else:
        st.rerun()


def kill_switch(wb: Workbench, config: ExperimentConfig, based_on: int) -> None:
    pending = f"confirm_kill_{config.name}"
    if config.killed:
        st.warning("Killed: every unit goes to control.", icon=":material/block:")
        if st.button("Revive experiment", key=f"revive_{config.name}"):
            ask(f"revive::{config.name}")
        question = (
            f"Revive {config.name}? Its units are assigned by its weights again "
            f"({weights_text(config)}, ramp {config.ramp:g}%), as a new revision."
        )
        if confirmed(f"revive::{config.name}", question, "Yes, revive it", "Keep it killed"):
            _change(wb, config.name, killed=False, note="revived", based_on=based_on)
        return
    if not st.session_state.get(pending):
        if st.button("Kill switch…", key=f"kill_{config.name}", icon=":material/block:"):
            st.session_state[pending] = True
            st.rerun()
        return
    st.error(
        escape_markdown(
            f"Send every unit of {config.name} to {config.control.name} now? This is a new "
            "revision; live services pick it up with the next exported config."
        ),
        icon=":material/warning:",
    )
    yes, no, _ = st.columns([1, 1, 4])
    if yes.button("Kill it", type="primary", key=f"kill_yes_{config.name}"):
        st.session_state.pop(pending, None)
        _change(wb, config.name, killed=True, note="kill switch", based_on=based_on)
    if no.button("Keep running", key=f"kill_no_{config.name}"):
        st.session_state.pop(pending, None)
        st.rerun()


def _change(wb: Workbench, name: str, *, killed: bool, note: str, based_on: int) -> None:
    try:
        wb.experiments.update(name, killed=killed, note=note, based_on=based_on)
    except PromptlabError as exc:
        show_error(exc)
    else:
        st.rerun()


@st.fragment(run_every=POLL_EVERY)
def follow(wb: Workbench, run_id: str) -> None:
    view = wb.runs.view(run_id)
    c = view.counts
    st.progress(
        view.fraction_closed,
        text=f"{run_id} · {view.status}: {c.finished} of {view.total} items closed "
        f"({c.succeeded} succeeded, {c.failed} failed)",
    )
    if view.variants:
        st.dataframe(
            pd.DataFrame(
                {
                    "variant": v.name,
                    "items": v.succeeded + v.failed + v.cancelled + v.open,
                    "succeeded": v.succeeded,
                    "completion": v.completion_rate,
                    "p50 ms": v.latency_p50_ms,
                    "p90 ms": v.latency_p90_ms,
                }
                for v in view.variants
            ),
            column_config={
                "completion": st.column_config.NumberColumn(
                    format="percent", help="succeeded / finished items"
                ),
                "p50 ms": st.column_config.NumberColumn(format="%.0f"),
                "p90 ms": st.column_config.NumberColumn(format="%.0f"),
            },
            hide_index=True,
            width="stretch",
        )
    # A plain link: the Runs page opens the run (and its items) from ?run= on any server.
    st.markdown(f":material/play_circle: [Open {run_id} in Runs](runs?run={run_id})")


require_shell("pages/experiments.py")
st.title("Experiments")
workbench = get_workbench()
create_form(workbench)
configs = workbench.experiments.list()
if configs:
    experiments_table(configs)
    names = [c.name for c in configs]
    if st.session_state.get("experiment_choice") not in names:
        st.session_state["experiment_choice"] = names[0]
    chosen = st.selectbox("Experiment", names, key="experiment_choice")
    current = next(c for c in configs if c.name == chosen)
    change_form(workbench, current)
    rollout_tiles(workbench, current)
    # Full width: each revision names every variant's version and share.
    st.markdown("**Revisions**")
    revisions_table(workbench, chosen)
    launch(workbench, current)
    if st.session_state.get("launched_run"):
        follow(workbench, st.session_state["launched_run"])
else:
    st.info("No experiments yet.", icon=":material/info:")
