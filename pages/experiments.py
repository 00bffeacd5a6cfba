"""Experiments: create one from prompt versions, change its split, launch it on a dataset."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pandas as pd
import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.experiments import ExperimentConfig
from promptlab.facades.runs import RunEstimate, RunSpec
from promptlab.records import DatasetInfo
from promptlab.ui.estimate import show_estimate
from promptlab.ui.resources import get_workbench
from promptlab.ui.seen import seen_before
from promptlab.ui.shell import require_shell
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench

POLL_EVERY = timedelta(seconds=1)
#: Seconds an estimate is reused while the form does not change (results may come in).
ESTIMATE_TTL = 30
MAX_VARIANTS = 6


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


def version_labels(wb: Workbench) -> dict[str, tuple[str, ...]]:
    """Every saved prompt version (`name@1.2.0`, newest first per prompt) with its
    labels: what a variant of a new experiment may be."""
    return {
        version.ref: tuple(sorted(k for k, v in prompt.labels.items() if v == version.semver))
        for prompt in wb.prompts.list()
        for version in wb.prompts.versions(prompt.name)
    }


def labelled(versions: dict[str, tuple[str, ...]], label: str, prompt: str | None = None) -> str:
    """The first version carrying `label` (of `prompt`, when given), else ""."""
    return next(
        (
            ref
            for ref, labels in versions.items()
            if label in labels and prompt in (None, ref.partition("@")[0])
        ),
        "",
    )


def create_form(wb: Workbench) -> None:
    versions = version_labels(wb)
    with st.expander("New experiment", icon=":material/add:", expanded=not wb.experiments.list()):
        if not versions:
            st.info("Create a prompt first (Prompts page).", icon=":material/info:")
            return
        refs = list(versions)
        # Control starts on a production version, the variants on the same prompt's staging.
        control = labelled(versions, "production") or refs[0]
        challenger = labelled(versions, "staging", control.partition("@")[0]) or control
        count = st.number_input(
            "Variants", min_value=2, max_value=MAX_VARIANTS, value=2, key="new_count"
        )
        with st.form("new_experiment"):
            name = st.text_input("Name", key="new_name", placeholder="triage-tone")
            left, right = st.columns(2)
            mode = left.selectbox(
                "Mode",
                ["split", "all"],
                key="new_mode",
                help="split: each unit (user, session) gets one variant, sticky; "
                "all: every row through every variant, for a paired comparison",
            )
            unit_column = right.text_input(
                "Unit column",
                key="new_unit",
                help="The dataset column holding the user or session id (for split runs)",
            )
            variants = []
            for i in range(int(count)):
                st.markdown(f"**Variant {i + 1}**" + (" (control)" if i == 0 else ""))
                cols = st.columns([2, 4, 2, 1])
                v_name = cols[0].text_input(
                    "Name", value="control" if i == 0 else f"variant-{i}", key=f"new_v{i}_name"
                )
                version = cols[1].selectbox(
                    "Prompt version",
                    refs,
                    index=refs.index(control if i == 0 else challenger),
                    format_func=lambda ref: (
                        f"{ref} ({', '.join(versions[ref])})" if versions[ref] else ref
                    ),
                    key=f"new_v{i}_prompt",
                    help="Every saved version, with its labels in brackets; the experiment "
                    "keeps the version picked here even when a label moves on",
                )
                model = cols[2].text_input(
                    "Model (optional)",
                    key=f"new_v{i}_model",
                    help="endpoint:model, e.g. sim:fast; empty: the version's own model",
                )
                weight = cols[3].number_input(
                    "Weight", min_value=0.0, value=50.0, key=f"new_v{i}_weight"
                )
                variant: dict[str, Any] = {"name": v_name, "prompt": version, "weight": weight}
                if i == 0:
                    variant["control"] = True
                if model:
                    variant["model"] = model
                variants.append(variant)
            submitted = st.form_submit_button("Create experiment", type="primary")
        if submitted:
            data: dict[str, Any] = {"name": name, "mode": mode, "variants": variants}
            if unit_column:
                data["unit_column"] = unit_column
            try:
                config, created = wb.experiments.add(data)
            except PromptlabError as exc:
                show_error(exc)
            else:
                st.session_state["experiment_choice"] = config.name
                shown = escape_markdown(config.name)
                if created:
                    st.success(f"Created {shown}", icon=":material/check_circle:")
                else:
                    st.info(f"{shown} already has this content", icon=":material/info:")


def change_form(wb: Workbench, config: ExperimentConfig) -> None:
    """Weights and ramp as a new revision; the kill switch asks for a confirmation."""
    st.markdown("**Traffic**")
    # Widget keys carry the experiment and its revision: a widget of another experiment
    # (or of the revision before a save) must never lend its value to this one. The form's
    # key does not: a click on a form shown at an older revision must still arrive, to be
    # refused as made on that revision (the one shown before the click) and not lost.
    rev = f"{config.name}_{config.revision}"
    based_on = seen_before(f"experiment::{config.name}", config.revision)
    with st.form(f"change_{config.name}"):
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
        if st.form_submit_button("Save as new revision"):
            try:
                wb.experiments.update(
                    config.name, weights=weights, ramp=ramp, note=note, based_on=based_on
                )
            except PromptlabError as exc:
                show_error(exc)
            else:
                st.rerun()
    kill_switch(wb, config, based_on)


def kill_switch(wb: Workbench, config: ExperimentConfig, based_on: int) -> None:
    pending = f"confirm_kill_{config.name}"
    if config.killed:
        st.warning("Killed: every unit goes to control.", icon=":material/block:")
        if st.button("Revive experiment", key=f"revive_{config.name}"):
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


def history(wb: Workbench, name: str) -> None:
    revisions = wb.experiments.history(name)
    st.dataframe(
        pd.DataFrame(
            {
                "revision": c.revision,
                "split": " / ".join(f"{v.name} {v.weight:g}" for v in c.variants),
                "ramp %": c.ramp,
                "killed": c.killed,
                "note": c.note,
                "by": c.author,
                "at": c.created_at,
            }
            for c in revisions
        ),
        hide_index=True,
        width="stretch",
    )


def fits(info: DatasetInfo, config: ExperimentConfig, mode: str) -> bool:
    """Whether a run of `config` on this dataset has its unit column without asking: the
    experiment's, or (when the experiment names none) the dataset's own."""
    if mode != "split":
        return True
    if config.unit_column:
        return config.unit_column in info.column_names
    return info.unit_column is not None


def launch(wb: Workbench, config: ExperimentConfig) -> None:
    st.markdown("**Launch on a dataset**")
    datasets = {d.name: d for d in wb.datasets.list()}
    if not datasets:
        st.info("Import a dataset first (Datasets page).", icon=":material/info:")
        return
    names = list(datasets)
    key = f"launch_{config.name}"
    # The mode chosen below on the last run (the widget's value), else the experiment's.
    chosen_mode = st.session_state.get(f"{key}_mode") or config.mode
    fitting = [n for n in names if fits(datasets[n], config, chosen_mode)]
    if not fitting:
        st.warning(escape_markdown(no_fit(config)), icon=":material/warning:")
    cols = st.columns([2, 1, 2, 1, 1])
    dataset = cols[0].selectbox(
        "Dataset",
        names,
        # When none has the experiment's unit column, one with a unit column of its own.
        index=names.index((fitting or [n for n in names if datasets[n].unit_column] or names)[0]),
        key=f"{key}_dataset",
        help="Opens on the first dataset that has the experiment's unit column",
    )
    info = datasets[dataset]
    mode = cols[1].selectbox(
        "Mode", ["split", "all"], index=0 if config.mode == "split" else 1, key=f"{key}_mode"
    )
    columns = info.column_names
    # The experiment's unit column, else the dataset's own; no silent fallback to the
    # first column: a split by the wrong column is not sticky.
    default_unit = next((c for c in (config.unit_column, info.unit_column) if c in columns), None)
    unit = cols[2].selectbox(
        "Unit column",
        columns,
        index=columns.index(default_unit) if default_unit else None,
        key=f"{key}_{dataset}_unit",
        disabled=mode != "split",
        placeholder="the user or session id column",
        help="The column holding the unit id (user, session) a split run assigns variants "
        "by: the experiment's unit column when the dataset has it, else the dataset's own",
    )
    repeats = cols[3].number_input("Repeats", 1, 1000, 1, key=f"{key}_repeats")
    limit = cols[4].number_input("Rows (0 = all)", 0, info.row_count, 0, key=f"{key}_limit")
    skip = st.checkbox(
        "Only rows that pass the variables check",
        key=f"{key}_skip",
        help="Rows a variant's template refuses get no items (see the Datasets page's row "
        "check); otherwise they fail as invalid_input",
    )
    if mode == "split" and not split_unit(wb, config, info, unit, key):
        return
    choice = LaunchChoice(
        config.name, config.revision, dataset, str(info.imported_at), mode,
        unit if mode == "split" else None, int(repeats), int(limit) or None, skip,
    )  # fmt: skip
    try:
        estimate = estimate_for(choice)
    except PromptlabError as exc:
        show_error(exc)
        return
    show_estimate(estimate)
    if st.button("Start", type="primary", key=f"{key}_start", icon=":material/play_arrow:"):
        try:
            st.session_state["launched_run"] = wb.runs.start(spec_for(wb, choice))
        except PromptlabError as exc:
            show_error(exc)


def no_fit(config: ExperimentConfig) -> str:
    what = (
        f"No dataset has the column {config.unit_column} that experiment {config.name} splits by"
        if config.unit_column
        else f"No dataset has a unit column, and experiment {config.name} names none"
    )
    return (
        f"{what}: pick a dataset and the column that holds its unit id (user, session) "
        "below (a dataset without a unit column can keep it as its own); or import a "
        "dataset with that column (Datasets page); or launch in all mode."
    )


def split_unit(
    wb: Workbench, config: ExperimentConfig, info: DatasetInfo, unit: str | None, key: str
) -> bool:
    """Say what a split run of this dataset lacks; False while it has no unit column."""
    lacks = bool(config.unit_column) and config.unit_column not in info.column_names
    missing = (
        f"{info.name} has no column {config.unit_column}, the unit column of experiment "
        f"{config.name}"
    )
    if unit is None:
        st.info(
            escape_markdown(
                f"{missing if lacks else f'{info.name} has no unit column'}: choose the column "
                "that holds the unit id (user, session) under Unit column, pick another "
                "dataset, or launch in all mode."
            ),
            icon=":material/info:",
        )
        return False
    if lacks:
        st.caption(escape_markdown(f"{missing}: this run splits by {unit}."))
    if info.unit_column is None:
        save_unit_column(wb, info.name, unit, key)
    return True


def save_unit_column(wb: Workbench, dataset: str, unit: str, key: str) -> None:
    """A dataset without a unit column gets the one picked above, on the spot."""
    if st.button(
        "Save as the dataset's unit column",
        key=f"{key}_{dataset}_save_unit",
        icon=":material/save:",
        help="Runs of experiments that name no unit column then split this dataset by it "
        "(the Datasets page can change it)",
    ):
        try:
            wb.datasets.set_unit_column(dataset, unit)
        except PromptlabError as exc:
            show_error(exc)
        else:
            st.success(
                escape_markdown(f"{dataset} now has unit column {unit}"),
                icon=":material/check_circle:",
            )


@dataclass(frozen=True)
class LaunchChoice:
    """What the launch form says; with the dataset's import time, it keys the estimate."""

    experiment: str
    revision: int
    dataset: str
    imported_at: str
    mode: str
    unit_column: str | None
    repeats: int
    limit_rows: int | None
    skip_invalid_rows: bool


def spec_for(wb: Workbench, choice: LaunchChoice) -> RunSpec:
    return wb.runs.experiment_spec(
        choice.experiment,
        choice.dataset,
        mode=choice.mode,
        unit_column=choice.unit_column,
        repeats=choice.repeats,
        limit_rows=choice.limit_rows,
        skip_invalid_rows=choice.skip_invalid_rows,
    )


@st.cache_data(ttl=ESTIMATE_TTL, show_spinner="Estimating…", max_entries=64)
def estimate_for(choice: LaunchChoice) -> RunEstimate:
    """The estimate reads rows and earlier results: once per form state, not per rerun."""
    wb = get_workbench()
    return wb.runs.estimate(spec_for(wb, choice))


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
    left, right = st.columns(2)
    with left:
        change_form(workbench, current)
    with right:
        st.markdown("**Revisions**")
        history(workbench, chosen)
    launch(workbench, current)
    if st.session_state.get("launched_run"):
        follow(workbench, st.session_state["launched_run"])
else:
    st.info("No experiments yet.", icon=":material/info:")
