"""The Compare page's pickers: what is compared (a run's variants, or two prompt versions
across runs or in production logs) and how (the data's state, the planned units, CUPED).
Each starts from the page's address and is written back to it
(promptlab/ui/compare_address.py), so a reload or a shared link shows the same view."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from promptlab.facades.analysis import RunWithResults
from promptlab.ui.compare_address import ADDRESS, CompareState, flag, whole
from promptlab.ui.widgets import escape_markdown
from promptlab.views.compare import PLANNED_UNITS_DEFAULT
from promptlab.workbench import Workbench

SOURCE_RUN, SOURCE_VERSIONS, SOURCE_LOGS = "A run's variants", "Two versions", "Production logs"
#: The source picked -> its name in the address (none for a run's variants).
SOURCES = {SOURCE_RUN: None, SOURCE_VERSIONS: "versions", SOURCE_LOGS: "logs"}
SOURCE_CHOICE = "compare_source"
RUN_CHOICE = "compare_run"
ALL_VARIANTS = "(every variant)"
STILL_COLLECTING, FINISHED = "Still collecting", "Finished"
#: The data state picked for versions and logs -> `sequential` (always valid).
DATA_STATES = {STILL_COLLECTING: True, FINISHED: False}
#: ... and its name in the address.
DATA_NAMES = {STILL_COLLECTING: "collecting", FINISHED: "finished"}
PLANNED_HELP = (
    "Units per arm the comparison will end at: while data is still collecting, the "
    "always-valid test is tuned to be sharpest there (and holds its 1% at any look)."
)
DATA_HELP = (
    "Still collecting: logs keep arriving (or runs are still going) and you will look "
    "again: always-valid (mSPRT) intervals and p-values. Finished: the data is complete, "
    "this is the final look: fixed-horizon tests, narrower."
)
CUPED_HELP = (
    "Uses each unit's rates in the logs before Since as a covariate (CUPED): the same "
    "answer with less noise when units behave alike before and after. Needs a Since date."
)


def pick_source(state: CompareState) -> str:
    """A run's variants, two versions or production logs (`mode` in the address)."""
    by_name = {name: label for label, name in SOURCES.items() if name}
    state.start(SOURCE_CHOICE, "mode", SOURCE_RUN, parse=by_name.get)
    source = st.segmented_control(
        "Compare", list(SOURCES), key=SOURCE_CHOICE, label_visibility="collapsed"
    )
    source = source or SOURCE_RUN  # the picked one clicked again: none picked
    state.show("mode", SOURCES[source])
    return source


def pick_run(runs: list[RunWithResults], state: CompareState) -> str:
    """The run to compare: the one the address names when it changes (a link followed),
    else the one picked before, else the newest with two or more variants. A run named
    that has no results stays in the address, said in one line, until another is picked."""
    labels = {
        r.run_id: f"{r.name} · {r.submitted_at:%Y-%m-%d %H:%M:%S} · {r.run_id} · "
        f"{len(r.variants)} variants · {r.results} results"
        for r in runs
    }
    comparable = [r.run_id for r in runs if len(r.variants) > 1]
    state.start(RUN_CHOICE, "run", (comparable or [runs[0].run_id])[0], options=labels)
    notice = st.container()  # above the picker, filled once a pick has had its say
    run_id = str(st.selectbox("Run", list(labels), format_func=labels.__getitem__, key=RUN_CHOICE))
    missing = ADDRESS.missing("run", run_id, labels)
    if missing:  # whatever the link said
        notice.warning(
            f"Run {escape_markdown(missing)} has no results to compare yet.",
            icon=":material/info:",
        )
    state.show("run", missing or run_id)
    return run_id


def pick_variants(
    wb: Workbench, run_id: str, variants: list[str], state: CompareState
) -> tuple[str, str | None]:
    """Control and variant pickers (control first: the experiment's, or the first): the
    control and the variant (None: every variant)."""
    default = wb.analysis.control_variant(run_id, variants)
    left, right = st.columns(2)
    key = f"control_{run_id}"
    state.start(key, "control", default, options=variants)
    control = str(left.selectbox("Control", variants, key=key))
    others = [ALL_VARIANTS, *(v for v in variants if v != control)]
    key = f"variant_{run_id}_{control}"
    state.start(key, "variant", ALL_VARIANTS, options=others)
    other = right.selectbox("Variant", others, key=key)
    state.show("control", control, default)
    state.show("variant", other, ALL_VARIANTS)
    return control, None if other == ALL_VARIANTS else str(other)


@dataclass(frozen=True)
class VersionsPick:
    """Two versions to compare and how: `compare_versions`'s arguments."""

    a: str
    b: str
    #: As typed (an age or a date); empty for everything.
    since: str
    #: Whether the data is still collecting (the always-valid test).
    collecting: bool
    #: Units per arm the always-valid test is tuned to (None: not collecting).
    planned_units: int | None
    cuped: bool


def pick_versions(labels: list[str], logs: bool, state: CompareState) -> VersionsPick:
    """Version A (control) and B, since when, and the data's state (`data_controls`)."""
    left, middle, right = st.columns([2, 2, 1])
    key = f"ver_a_{logs}"
    state.start(key, "a", labels[0], options=labels)
    a = str(left.selectbox("Version A (control)", labels, key=key))
    others = [v for v in labels if v != a]
    key = f"ver_b_{logs}_{a}"
    state.start(key, "b", others[0], options=others)
    b = str(middle.selectbox("Version B", others, key=key))
    key = f"ver_since_{logs}"
    state.start(key, "since", "")
    since = right.text_input(
        "Since",
        key=key,
        placeholder="e.g. 7d",
        help="An age like 7d, 24h, 30m, 2w or a date like 2026-11-01; empty: everything.",
    ).strip()
    for param, value in (("a", a), ("b", b), ("since", since)):
        state.show(param, value, "" if param == "since" else None)
    return VersionsPick(a, b, since, *data_controls(logs, since, state))


def data_controls(logs: bool, since: str, state: CompareState) -> tuple[bool, int | None, bool]:
    """Whether the data is still collecting, the planned units per arm (only then), and
    whether to adjust by CUPED (logs with a Since only)."""
    left, middle, right = st.columns([2, 1, 2], vertical_alignment="bottom")
    default = STILL_COLLECTING if logs else FINISHED
    by_name = {name: label for label, name in DATA_NAMES.items()}
    key = f"ver_state_{logs}"
    state.start(key, "data", default, parse=by_name.get)
    picked = left.segmented_control("Data", list(DATA_STATES), key=key, help=DATA_HELP)
    collecting = DATA_STATES[picked or default]
    key = f"ver_planned_{logs}"
    state.start(key, "planned", PLANNED_UNITS_DEFAULT, parse=whole(1))
    planned = middle.number_input(
        "Planned units per arm",
        min_value=1,
        step=100,
        key=key,
        disabled=not collecting,
        help=PLANNED_HELP,
    )
    state.show("data", DATA_NAMES[picked or default], DATA_NAMES[default])
    state.show("planned", int(planned) if collecting else None, PLANNED_UNITS_DEFAULT)
    if not logs:
        return collecting, int(planned) if collecting else None, False
    # Only meaningful with a since date: the units' logs before it are the covariate.
    state.start("ver_cuped", "cuped", False, parse=flag)
    ticked = right.checkbox(
        "CUPED: adjust by each unit's logs before Since",
        key="ver_cuped",
        disabled=not since,
        help=CUPED_HELP,
    )
    state.show("cuped", ticked, False)
    return collecting, int(planned) if collecting else None, bool(ticked and since)
