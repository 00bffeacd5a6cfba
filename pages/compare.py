"""Compare: is variant B better than control, and how sure are we? The app's first page
once any run has results. `?run=RUN_ID` opens that run. Besides a run's variants, two
prompt versions can be compared across every run's results, or in imported production
logs.

It answers first: a sentence per variant (`answer_sentences`) and the method used
(fixed horizon for finished data, always valid while it is still collecting). Below the
pickers are tabs: Answer, Charts and, for a run, Outputs. Only the open tab runs, so a
first view reads and sends no figure and a fresh browser loads no Plotly code until
Charts is opened (`?tab=Charts` opens it from a link). The page only lays things out:
the sentences and table rows come from promptlab/views/compare.py, the Charts tab from
promptlab/ui/compare_charts.py, the reads from `wb.analysis`
(promptlab/facades/analysis.py).
"""

from __future__ import annotations

import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.facades.analysis import Comparison, RunWithResults
from promptlab.ui.address import Address
from promptlab.ui.compare_charts import run_charts, version_charts
from promptlab.ui.downloads import comparison_download, download_buttons
from promptlab.ui.lazy_tabs import open_tab
from promptlab.ui.repeats import repeats_section
from promptlab.ui.resources import get_workbench
from promptlab.ui.shell import require_shell
from promptlab.ui.side_by_side import side_by_side
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.views.compare import (
    PLANNED_UNITS_DEFAULT,
    answer_sentences,
    interval_level,
    srm_verdict,
    summary_rows,
    units_needed,
    units_needed_text,
)
from promptlab.workbench import Workbench

RUN_CHOICE = "compare_run"
#: The page's address: the run compared, and the tab open when it is not the first.
ADDRESS = Address("compare", "run", "tab")
ANSWER, CHARTS, OUTPUTS = "Answer", "Charts", "Outputs"
RUN_TABS = (ANSWER, CHARTS, OUTPUTS)
VERSION_TABS = (ANSWER, CHARTS)
#: The open tab, per source: a run's, versions', logs'.
RUN_TAB, VERSIONS_TAB, LOGS_TAB = "compare_tab", "compare_tab_versions", "compare_tab_logs"
#: Widget values kept while their tab is closed (key prefixes, by tab).
KEEPS = {ANSWER: ("compare_mde",), OUTPUTS: ("sbs_diff_", "sbs_page_", "repeats-metric-")}
SOURCE_RUN, SOURCE_VERSIONS, SOURCE_LOGS = "A run's variants", "Two versions", "Production logs"
ALL_VARIANTS = "(every variant)"
#: The method's help, by `Comparison.sequential`.
METHOD_HELP = {
    False: "Fixed horizon, the final look: each interval and p-value holds for one look at "
    "data that is complete, as a finished run's is. It gets 4% of the 5% false-positive "
    "budget (96% intervals); the looks while data arrived share the other 1%, so looking "
    "then and now together still calls a difference that is not there at most 5% of the time.",
    True: "Always valid (mixture SPRT): intervals and p-values that stay valid "
    "however often you look while data is still arriving, so a live run or live logs can "
    "be watched. They take 1% of the 5% budget (99% intervals) and are tuned to be "
    "sharpest at the planned units per arm; the final look, at the other 4%, is narrower.",
}
FAMILY_HELP = (
    "The primary metric decides; guardrails are watched. Holm's correction runs over these "
    "metrics for every variant against control, whichever variant is shown, so picking one "
    "never changes a p-value. A run spec declares them under `metrics: {primary: ..., "
    "guardrails: [...]}`; a metric shown but not declared is exploratory (no verdict)."
)
STILL_COLLECTING, FINISHED = "Still collecting", "Finished"
#: The data state picked for versions and logs -> `sequential` (always valid).
DATA_STATES = {STILL_COLLECTING: True, FINISHED: False}
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
#: Column help of the summary table.
TABLE_HELP = {
    "units": st.column_config.TextColumn(
        help="Units per arm, control/variant: the unit that was randomized (a user, a "
        "customer); dataset rows in an all-mode run; requests when rows name no unit."
    ),
    "requests": st.column_config.TextColumn(help="Requests behind the units, control/variant."),
    "adj p": st.column_config.TextColumn(help="p adjusted by Holm across the table's tests."),
    "P(beat)": st.column_config.TextColumn(
        help="Chance the variant beats control (the Bayesian view: flat prior, the same "
        "per-unit estimate as the test). Not adjusted for looks or for the table's other "
        "rows: with no difference at all it exceeds 95% on 5% of rows."
    ),
    "risk": st.column_config.TextColumn(
        help="Expected loss of choosing the variant: how much worse it is on average in "
        "the cases where it is worse, in the metric's unit."
    ),
    "why": st.column_config.TextColumn(help="Why the verdict is what it is."),
}


def pick_run(runs: list[RunWithResults]) -> str:
    """The run to compare: the one `?run=` names when the address changes (a link
    followed), else the one picked before, else the newest with two or more variants."""
    labels = {
        r.run_id: f"{r.name} · {r.submitted_at:%Y-%m-%d %H:%M:%S} · {r.run_id} · "
        f"{len(r.variants)} variants · {r.results} results"
        for r in runs
    }
    ADDRESS.open_choice("run", RUN_CHOICE, labels)
    if st.session_state.get(RUN_CHOICE) not in labels:
        comparable = [r.run_id for r in runs if len(r.variants) > 1]
        st.session_state[RUN_CHOICE] = (comparable or [runs[0].run_id])[0]
    notice = st.container()  # above the picker, filled once a pick has had its say
    run_id = st.selectbox("Run", list(labels), format_func=labels.__getitem__, key=RUN_CHOICE)
    missing = ADDRESS.keep_choice("run", run_id, labels)
    if missing:  # whatever the link said
        notice.warning(
            f"Run {escape_markdown(missing)} has no results to compare yet.",
            icon=":material/info:",
        )
    return str(run_id)


def pick_comparison(wb: Workbench, run_id: str, variants: list[str]) -> Comparison:
    """Control and variant pickers (control first: the experiment's, or the first)."""
    default = wb.analysis.control_variant(run_id, variants)
    left, right = st.columns(2)
    control = left.selectbox(
        "Control", variants, index=variants.index(default), key=f"control_{run_id}"
    )
    others = [ALL_VARIANTS, *(v for v in variants if v != control)]
    other = right.selectbox("Variant", others, key=f"variant_{run_id}_{control}")
    return wb.analysis.compare(run_id, control, None if other == ALL_VARIANTS else other)


def answer(comparison: Comparison) -> None:
    """The answer first: a sentence per variant, and the method behind it."""
    if comparison.scope:
        st.info(escape_markdown(comparison.scope), icon=":material/info:")
    for note in comparison.notes:
        st.warning(escape_markdown(note), icon=":material/warning:")
    with st.container(border=True):
        sentences = answer_sentences(comparison)
        for sentence in sentences or ["Nothing to compare yet."]:
            st.markdown(escape_markdown(sentence))
        tuned = comparison.planned_units if comparison.sequential else None
        st.caption(
            f"Method: **{comparison.method}**"
            + (f", tuned to {tuned:,} units per arm" if tuned else ""),
            help=METHOD_HELP[comparison.sequential],
        )
        decides = comparison.family.describe()
        st.caption(escape_markdown(decides[:1].upper() + decides[1:]), help=FAMILY_HELP)
        reduced = [r for r in comparison.rows if r.variance_reduction is not None]
        if reduced:
            st.caption(
                "CUPED removed "
                + ", ".join(
                    f"{r.variance_reduction:.0%} of the variance of {r.metric}" for r in reduced
                )
            )


def summary(comparison: Comparison) -> None:
    kind = "paired tests over the same inputs" if comparison.paired else "independent samples"
    # The Holm family: the declared metrics for every variant against control, fixed.
    family = comparison.family_size
    holm = (
        f"p-values adjusted by Holm over the declared family's {family} tests (a row "
        "without data or with too few units counts as p = 1)"
        if any(r.adjusted_p is not None for r in comparison.rows)
        else f"no row could be tested yet (Holm's family: {family} tests)"
    )
    level = interval_level(comparison.method)
    st.caption(
        f"{comparison.mode} mode ({kind}) · control **{escape_markdown(comparison.control)}** · "
        f"{level} intervals · {holm} · the why column gives each verdict's reason"
    )
    srm = comparison.srm
    if srm is not None and srm.mismatch:
        st.error(f"**SRM check**: {escape_markdown(srm_verdict(srm))}", icon=":material/warning:")
    elif srm is not None and not srm.judged:
        st.info(f"SRM check {escape_markdown(srm_verdict(srm))}", icon=":material/info:")
    elif srm is not None:
        st.success(f"SRM check {escape_markdown(srm_verdict(srm))}", icon=":material/check:")
    elif comparison.mode == "all":
        st.caption("No SRM check: in an all-mode run every input went to every variant.")
    else:
        st.caption("No SRM check: these versions were not split by an experiment's weights.")
    # The verdict right after the metric: the answer first, the figures behind it.
    order = (
        "variant",
        "metric",
        "verdict",
        "control",
        "variant value",
        "delta",
        "interval",
        "p",
        "adj p",
        "P(beat)",
        "risk",
        "units",
        "requests",
        "why",
        "method",
    )
    st.dataframe(
        summary_rows(comparison),
        hide_index=True,
        width="stretch",
        column_order=order,
        column_config=TABLE_HELP,
    )
    comparison_download(get_workbench(), comparison, key=f"dl_cmp_{comparison.run_id}")
    sample_size(comparison)


def sample_size(comparison: Comparison) -> None:
    mde = st.columns([1, 2])[0].number_input(
        "Smallest change in completion rate worth detecting (percentage points)",
        min_value=0.1,
        max_value=50.0,
        value=5.0,
        step=0.5,
        key="compare_mde",
    )
    needed = units_needed(comparison, float(mde))
    if needed is None:
        st.caption("Sample size: control has finished nothing yet.")
    else:
        st.caption(f"Sample size: {units_needed_text(needed)}.")


def versions(wb: Workbench, logs: bool) -> None:
    """Version B against version A: from every run's results, or from production logs."""
    rows = wb.analysis.log_metrics() if logs else wb.analysis.metrics()
    labels = list(dict.fromkeys(r.label for r in rows if "@" in r.label))
    if len(labels) < 2:
        st.info(
            "Two versions with production logs are needed: import a log on the Datasets page "
            "(or `promptlab logs import FILE`)."
            if logs
            else "Two prompt versions with results are needed.",
            icon=":material/info:",
        )
        return
    left, middle, right = st.columns([2, 2, 1])
    a = left.selectbox("Version A (control)", labels, key=f"ver_a_{logs}")
    b = middle.selectbox("Version B", [v for v in labels if v != a], key=f"ver_b_{logs}_{a}")
    since = right.text_input(
        "Since",
        key=f"ver_since_{logs}",
        placeholder="e.g. 7d",
        help="An age like 7d, 24h, 30m, 2w or a date like 2026-11-01; empty: everything.",
    ).strip()
    collecting, planned_units, cuped = data_controls(logs, since)
    try:
        comparison = wb.analysis.compare_versions(
            a,
            b,
            logs=logs,
            since=since or None,
            sequential=collecting,
            cuped=cuped,
            planned_units=planned_units,
        )
    except PromptlabError as exc:
        show_error(exc)
        return
    tab, container = open_tab(VERSION_TABS, key=LOGS_TAB if logs else VERSIONS_TAB, keeps=KEEPS)
    with container:
        if tab == CHARTS:
            version_charts(wb, comparison, (a, b), logs, since or None)
        else:
            answer(comparison)
            summary(comparison)


def data_controls(logs: bool, since: str) -> tuple[bool, int | None, bool]:
    """Whether the data is still collecting, the planned units per arm (only then), and
    whether to adjust by CUPED (logs with a Since only)."""
    left, middle, right = st.columns([2, 1, 2], vertical_alignment="bottom")
    state = left.segmented_control(
        "Data",
        list(DATA_STATES),
        default=STILL_COLLECTING if logs else FINISHED,
        key=f"ver_state_{logs}",
        help=DATA_HELP,
    )
    collecting = DATA_STATES[state or (STILL_COLLECTING if logs else FINISHED)]
    planned = middle.number_input(
        "Planned units per arm",
        min_value=1,
        value=PLANNED_UNITS_DEFAULT,
        step=100,
        key=f"ver_planned_{logs}",
        disabled=not collecting,
        help=PLANNED_HELP,
    )
    # Only meaningful with a since date: the units' logs before it are the covariate.
    cuped = (
        logs
        and right.checkbox(
            "CUPED: adjust by each unit's logs before Since",
            key="ver_cuped",
            disabled=not since,
            help=CUPED_HELP,
        )
        and bool(since)
    )
    return collecting, int(planned) if collecting else None, cuped


def run_variants(wb: Workbench, runs: list[RunWithResults]) -> None:
    # Read before the run picker takes the address's change: a link names the tab too.
    linked = ADDRESS.named().get("tab", ANSWER) if ADDRESS.changed() else None
    run_id = pick_run(runs)
    variants = next(r.variants for r in runs if r.run_id == run_id)
    comparison = None
    if len(variants) > 1:
        try:
            comparison = pick_comparison(wb, run_id, variants)
        except PromptlabError as exc:
            show_error(exc)
            return
    if linked is not None:
        st.session_state[RUN_TAB] = linked if linked in RUN_TABS else ANSWER
    tab, container = open_tab(RUN_TABS, key=RUN_TAB, keeps=KEEPS)
    ADDRESS.put("tab", None if tab == ANSWER else tab)
    with container:
        run_tab(wb, tab, run_id, variants, comparison)


def run_tab(
    wb: Workbench, tab: str, run_id: str, variants: list[str], comparison: Comparison | None
) -> None:
    """The open tab of a run's comparison (None: the run has one variant)."""
    if tab == CHARTS:
        run_charts(wb, run_id, variants, comparison)
    elif tab == OUTPUTS:
        repeats_section(wb, run_id)  # only when the run repeats its rows
        download_buttons(wb, "metrics", key=f"dl_metrics_{run_id}", run_id=run_id)
        if comparison is not None:
            side_by_side(wb, run_id, comparison.control, comparison.paired)
    elif comparison is None:
        st.info(
            "This run has one variant: nothing to compare it with (its figures: Charts).",
            icon=":material/info:",
        )
    else:
        answer(comparison)
        summary(comparison)


def main() -> None:
    require_shell("pages/compare.py")
    st.title("Compare")
    wb = get_workbench()
    if ADDRESS.changed() and ADDRESS.named():
        st.session_state["compare_source"] = SOURCE_RUN  # a link to a run: show its variants
    source = st.segmented_control(
        "Compare",
        [SOURCE_RUN, SOURCE_VERSIONS, SOURCE_LOGS],
        default=SOURCE_RUN,
        key="compare_source",
        label_visibility="collapsed",
    )
    if source == SOURCE_VERSIONS:
        versions(wb, logs=False)
        return
    if source == SOURCE_LOGS:
        versions(wb, logs=True)
        return
    runs = wb.analysis.runs_with_results(include=ADDRESS.named().get("run"))
    if not runs:
        st.info("No results yet: start a run on the Runs page.", icon=":material/info:")
        return
    run_variants(wb, runs)


main()
