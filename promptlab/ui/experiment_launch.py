"""The Experiments page's launch form: an experiment on a dataset (mode, unit column,
repeats, rows), its estimate, and the run started from it."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.experiments import ExperimentConfig
from promptlab.facades.runs import RunEstimate, RunSpec
from promptlab.records import DatasetInfo
from promptlab.ui.estimate import show_estimate
from promptlab.ui.resources import get_workbench
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench

#: Seconds an estimate is reused while the form does not change (results may come in).
ESTIMATE_TTL = 30


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
    choice = launch_choice(wb, config, datasets)
    if choice is None:
        return
    try:
        estimate = estimate_for(choice)
    except PromptlabError as exc:
        show_error(exc)
        return
    show_estimate(estimate)
    start = st.button(
        "Start", type="primary", key=f"launch_{config.name}_start", icon=":material/play_arrow:"
    )
    if start:
        try:
            st.session_state["launched_run"] = wb.runs.start(spec_for(wb, choice))
        except PromptlabError as exc:
            show_error(exc)


def launch_choice(
    wb: Workbench, config: ExperimentConfig, datasets: dict[str, DatasetInfo]
) -> LaunchChoice | None:
    """The form's inputs as a choice; None while a split run lacks its unit column."""
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
        return None
    return LaunchChoice(
        config.name,
        config.revision,
        dataset,
        str(info.imported_at),
        mode,
        unit if mode == "split" else None,
        int(repeats),
        int(limit) or None,
        skip,
    )


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
