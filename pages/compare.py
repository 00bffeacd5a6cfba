"""Compare: is variant B better than control, and how sure are we? The app's first page
once any run has results. `?run=RUN_ID` opens that run. Besides a run's variants, two
prompt versions can be compared across every run's results, or in imported production
logs. The whole view is in the address (`?mode=versions&a=...&b=...&tab=Charts`,
promptlab/ui/compare_address.py): a reload or a shared link shows the same; the
pickers are in promptlab/ui/compare_pickers.py.

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
from promptlab.ui.compare_address import ADDRESS, CompareState, between
from promptlab.ui.compare_charts import run_charts, version_charts
from promptlab.ui.compare_pickers import (
    SOURCE_LOGS,
    SOURCE_RUN,
    pick_run,
    pick_source,
    pick_variants,
    pick_versions,
)
from promptlab.ui.decision import decided_or_live
from promptlab.ui.downloads import comparison_download, download_buttons
from promptlab.ui.drift import drift_section
from promptlab.ui.lazy_tabs import open_tab
from promptlab.ui.repeats import repeats_section
from promptlab.ui.resources import get_workbench
from promptlab.ui.shell import require_shell
from promptlab.ui.side_by_side import side_by_side
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.views.compare import (
    answer_sentences,
    interval_level,
    srm_verdict,
    strata_note,
    stratum_rows,
    summary_rows,
    units_needed,
    units_needed_text,
)
from promptlab.views.repeats import SPREAD_METRICS
from promptlab.workbench import Workbench

ANSWER, CHARTS, OUTPUTS = "Answer", "Charts", "Outputs"
RUN_TABS = (ANSWER, CHARTS, OUTPUTS)
VERSION_TABS = (ANSWER, CHARTS)
#: The open tab, per source: a run's, versions', logs'.
RUN_TAB, VERSIONS_TAB, LOGS_TAB = "compare_tab", "compare_tab_versions", "compare_tab_logs"
#: Widget values kept while their tab is closed (key prefixes, by tab).
KEEPS = {ANSWER: ("compare_mde",), OUTPUTS: ("sbs_diff_", "sbs_page_", "repeats-metric-")}
#: The change in completion to detect (percentage points): its key and first value.
MDE_KEY, MDE_DEFAULT = "compare_mde", 5.0
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
            + (f", tuned to {tuned:,} units per arm" if tuned else "")
            + f" · {interval_level(comparison.method)} intervals in every table and chart",
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
    note = strata_note(comparison)
    if note:  # the combined rows above, each run's own below: one line says which is which
        st.caption(escape_markdown(note))
        st.dataframe(stratum_rows(comparison), hide_index=True, width="stretch")
    sample_size(comparison)


def sample_size(comparison: Comparison) -> None:
    # Its first value is put in the session (`settled`): the address may name another.
    mde = st.columns([1, 2])[0].number_input(
        "Smallest change in completion rate worth detecting (percentage points)",
        min_value=0.1,
        max_value=50.0,
        step=0.5,
        key=MDE_KEY,
    )
    needed = units_needed(comparison, float(mde))
    if needed is None:
        st.caption("Sample size: control has finished nothing yet.")
    else:
        st.caption(f"Sample size: {units_needed_text(needed)}.")


def versions(wb: Workbench, logs: bool, state: CompareState) -> None:
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
    picked = pick_versions(labels, logs, state)
    key = LOGS_TAB if logs else VERSIONS_TAB
    settled(state, VERSION_TABS, key)
    try:
        comparison = wb.analysis.compare_versions(
            picked.a,
            picked.b,
            logs=logs,
            since=picked.since or None,
            sequential=picked.collecting,
            cuped=picked.cuped,
            planned_units=picked.planned_units,
        )
    except PromptlabError as exc:
        show_error(exc)
        return
    if logs:  # once decided, the stored final look stands in for the live one
        refs, since = (picked.a, picked.b), picked.since or None
        comparison = decided_or_live(wb, refs, comparison, picked.planned_units, since)
    tab, container = open_tab(VERSION_TABS, key=key, keeps=KEEPS)
    with container:
        if tab == CHARTS:
            names = (picked.a, picked.b)
            version_charts(wb, comparison, names, logs, picked.since or None)
        else:
            answer(comparison)
            summary(comparison)


def settled(
    state: CompareState, tabs: tuple[str, ...], key: str, run_id: str | None = None
) -> None:
    """Once the pickers are drawn, before the comparison's reads: the open tab (keyed
    `key`) and the choices made inside a tab (the change to detect; a run's Repeats
    spread), started from the address and kept in it whichever tab is open; the
    address written now, so it is right however long the rest takes (or if it fails)."""
    state.start(key, "tab", ANSWER, options=tabs)
    state.show("tab", st.session_state[key], ANSWER)
    state.start(MDE_KEY, "mde", MDE_DEFAULT, parse=between(0.1, 50.0))
    state.show("mde", st.session_state[MDE_KEY], MDE_DEFAULT)
    if run_id is not None:
        metric, metrics = f"repeats-metric-{run_id}", list(SPREAD_METRICS)
        state.start(metric, "metric", metrics[0], options=metrics)
        state.show("metric", st.session_state[metric], metrics[0])
    state.write()


def run_variants(wb: Workbench, runs: list[RunWithResults], state: CompareState) -> None:
    run_id = pick_run(runs, state)
    variants = next(r.variants for r in runs if r.run_id == run_id)
    picked = pick_variants(wb, run_id, variants, state) if len(variants) > 1 else None
    settled(state, RUN_TABS, RUN_TAB, run_id)
    comparison = None
    if picked is not None:
        try:
            comparison = wb.analysis.compare(run_id, *picked)
        except PromptlabError as exc:
            show_error(exc)
            return
    tab, container = open_tab(RUN_TABS, key=RUN_TAB, keeps=KEEPS)
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
        drift_section(wb, run_id)
    else:
        answer(comparison)
        summary(comparison)
        drift_section(wb, run_id)


def main() -> None:
    require_shell("pages/compare.py")
    st.title("Compare")
    wb = get_workbench()
    # The whole view is in the address: what it names opens, what is picked goes back.
    state = CompareState()
    source = pick_source(state)
    if source == SOURCE_RUN:
        runs = wb.analysis.runs_with_results(include=ADDRESS.named().get("run"))
        if runs:
            run_variants(wb, runs, state)
        else:
            st.info("No results yet: start a run on the Runs page.", icon=":material/info:")
    else:
        versions(wb, source == SOURCE_LOGS, state)
    state.write()


main()
