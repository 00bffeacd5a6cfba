"""Audit: is the log whole (the hash chains verified), which events match a filter (run,
experiment, version, model, status, error kind, time, trace), and how one item came to
be: its trace as a timeline with every stage, the prompt sent and the output.

Deep link: `?trace=KEY` (an item's idempotency key, or 8+ hex digits of it) opens that
trace; the Runs and Compare pages link here from every result.

The page only lays things out: rows come from promptlab/views/audit.py, the figure from
promptlab/views/audit_charts.py, the reads from `wb.audit` (promptlab/facades/audit.py).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time

import pandas as pd
import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.facades.audit import MAX_DOWNLOAD_EVENTS, AuditFilter
from promptlab.ui.address import Address
from promptlab.ui.downloads import file_download
from promptlab.ui.resources import get_workbench
from promptlab.ui.shell import require_shell
from promptlab.ui.widgets import escape_markdown, show_error, show_messages
from promptlab.views.audit import (
    ChainSummary,
    chain_summary,
    event_rows,
    stage_rows,
    timeline_bars,
    trace_stages,
)
from promptlab.views.audit_charts import trace_timeline_chart
from promptlab.workbench import Workbench

ANY = "(any)"
#: Verify on opening the page up to this many events (under a second); above it, on
#: "Verify now" only (3-6 s at 100k events).
AUTO_VERIFY_EVENTS = 20_000
#: (database, event count, summary, checked at) of the last verification this session.
VERIFIED = "_audit_verified"
#: A verification of the same log (its database and event count) made by another visit
#: this long ago at most is shown (with when it was made) instead of walking every chain
#: again on each opening: 60 ms at 800 events, seconds at 20,000.
SHARED_VERIFICATION_TTL_S = 60
#: The trace shown: from `?trace=`, the trace id box or a row picked in the table.
TRACE_CHOICE = "audit_trace_choice"
DEFAULT_LIMIT = 500
#: The page's address: the trace shown.
ADDRESS = Address("audit", "trace")


def chain_status(wb: Workbench) -> None:
    """The chains' status: verified on opening for small logs, on request for large."""
    count = wb.audit.count()
    db = str(wb.settings.db_path)
    left, right = st.columns([5, 1], vertical_alignment="center")
    clicked = right.button("Verify now", icon=":material/verified:", key="audit_verify")
    last = st.session_state.get(VERIFIED)
    fresh = last is not None and last[0] == db and last[1] == count
    if clicked or (not fresh and count <= AUTO_VERIFY_EVENTS):
        if clicked:  # now, not another visit's
            shared_verification.clear()
        summary, checked = shared_verification(wb, db, count)
        last = (db, count, summary, checked)
        st.session_state[VERIFIED] = last
        fresh = True
    with left:
        if not fresh or last is None:
            st.info(
                f"{count} events; verifying every chain takes a moment at this size: "
                "press Verify now.",
                icon=":material/pending:",
            )
            return
        show_summary(last[2], last[3])


def show_summary(summary: ChainSummary, checked: datetime) -> None:
    when = f" · checked {checked:%H:%M:%S} UTC"
    if summary.ok:
        st.success(summary.headline + when, icon=":material/verified:")
    else:
        lines = "\n".join(f"- {escape_markdown(p)}" for p in summary.problems)
        st.error(f"{summary.headline}{when}\n\n{lines}", icon=":material/gpp_bad:")
    if summary.unanchored:
        st.caption(
            f"{summary.unanchored} run chain(s) not anchored by a run.submitted event "
            "(submitted with the audit off)."
        )


def filters(wb: Workbench) -> tuple[AuditFilter, bool]:
    """The filter widgets; returns what they select and whether newest comes first."""
    runs = {r.run.run_id: f"{r.run.name} · {r.run.run_id}" for r in wb.runs.list()}
    facets = cached_facets(wb, str(wb.settings.db_path), wb.audit.count())
    experiments = [c.name for c in wb.experiments.list()]
    cols = st.columns(3)
    run = cols[0].selectbox(
        "Run", [ANY, *runs], format_func=lambda r: runs.get(r, r), key="audit_run"
    )
    experiment = cols[1].selectbox("Experiment", [ANY, *experiments], key="audit_experiment")
    version = cols[2].selectbox("Version", [ANY, *facets["version_id"]], key="audit_version")
    cols = st.columns(3)
    model = cols[0].selectbox("Model", [ANY, *facets["model"]], key="audit_model")
    status = cols[1].selectbox("Status", [ANY, *facets["status"]], key="audit_status")
    kind = cols[2].selectbox("Error kind", [ANY, *facets["error_kind"]], key="audit_error_kind")
    cols = st.columns([1, 1, 2, 1, 1])
    since = cols[0].date_input("From", value=None, key="audit_since")
    until = cols[1].date_input("To", value=None, key="audit_until")
    trace = cols[2].text_input(
        "Trace id", key="audit_trace_text", help="An item's key, or 8+ hex digits of it."
    )
    newest = cols[3].selectbox("Order", ["newest first", "oldest first"], key="audit_order")
    limit = cols[4].number_input(
        "Show at most",
        min_value=10,
        max_value=10_000,
        value=DEFAULT_LIMIT,
        step=100,
        key="audit_limit",
    )
    trace_id = resolve_trace(wb, trace.strip()) if trace.strip() else None
    where = AuditFilter(
        run_id=_chosen(run),
        experiment=_chosen(experiment),
        version_id=_chosen(version),
        model=_chosen(model),
        status=_chosen(status),
        error_kind=_chosen(kind),
        trace_id=trace_id,
        since=_day_start(since),
        until=_day_end(until),
        limit=int(limit),
    )
    return where, newest == "newest first"


@st.cache_data(ttl=SHARED_VERIFICATION_TTL_S, max_entries=4, show_spinner=False)
def shared_verification(_wb: Workbench, db: str, events: int) -> tuple[ChainSummary, datetime]:
    """Every chain verified, and when: shared by the visits of the next minute."""
    return chain_summary(_wb.audit.verify()), datetime.now(UTC)


@st.cache_data(max_entries=8, show_spinner=False)
def cached_facets(_wb: Workbench, db: str, events: int) -> dict[str, list[str]]:
    """The filter choices, read again only when the log grew (one scan: 0.1-0.5 s at 100k)."""
    return _wb.audit.facets()


def resolve_trace(wb: Workbench, text: str) -> str:
    """The full trace id of what was typed (a prefix resolves); shown as the trace too."""
    try:
        trace_id = wb.audit.trace(text).trace_id
    except PromptlabError as exc:
        show_error(exc)
        return text
    st.session_state[TRACE_CHOICE] = trace_id
    return trace_id


def _chosen(value: str | None) -> str | None:
    return None if value in (None, ANY) else value


def _day_start(day: date | None) -> datetime | None:
    return None if day is None else datetime.combine(day, time.min, tzinfo=UTC)


def _day_end(day: date | None) -> datetime | None:
    return None if day is None else datetime.combine(day, time.max, tzinfo=UTC)


def events_table(wb: Workbench, where: AuditFilter, newest_first: bool) -> None:
    events = wb.audit.page_events(where, newest_first)
    total = wb.audit.count(where)
    st.caption(f"showing {len(events)} of {total} events")
    if events:
        picked = st.dataframe(
            pd.DataFrame(event_rows(events)),
            hide_index=True,
            width="stretch",
            key="audit_events_table",
            on_select="rerun",
            selection_mode="single-row",
            column_config={"at": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss.SSS")},
        )
        rows = list(picked.selection.rows)
        seen = st.session_state.get("_audit_rows_seen")
        st.session_state["_audit_rows_seen"] = rows
        if rows and rows != seen and rows[0] < len(events) and events[rows[0]].trace_id:
            st.session_state[TRACE_CHOICE] = events[rows[0]].trace_id
    if total > MAX_DOWNLOAD_EVENTS:
        st.info(
            f"{total:,} events are more than a download holds ({MAX_DOWNLOAD_EVENTS:,}): "
            "narrow the filters, or write a run's events with "
            "`promptlab audit export --run RUN_ID -o FILE`."
        )
        return
    file_download(
        "audit_download",
        f"Download these {total} events (JSON Lines)",
        lambda: wb.audit.export_bytes(where),
        what=(where, total),
        file_name="audit-events.jsonl",
        mime="application/jsonl",
        help="Every event the filters select (not only those shown), each with its seq and "
        "hashes, as `promptlab audit export` writes them; recorded as a change event.",
        caption=f"{total} events: {where.describe() or 'every event'}",
    )


def trace_view(wb: Workbench, trace_id: str) -> None:
    """One item: its timeline, every stage with its fields, the prompt and the output."""
    try:
        trace = wb.audit.trace(trace_id)
    except PromptlabError as exc:
        show_error(exc)
        return
    ADDRESS.show(trace=trace.trace_id)
    st.subheader("Trace")
    run = f" · run `{trace.run_id}`" if trace.run_id else ""
    st.markdown(f"Trace `{trace.trace_id}`{run}")
    if trace.run_id:
        st.markdown(
            f":material/play_circle: [Open the item in Runs]"
            f"(runs?run={trace.run_id}&item={trace.trace_id})"
        )
    st.plotly_chart(
        trace_timeline_chart(timeline_bars(trace)), width="stretch", key="audit_timeline"
    )
    stages = trace_stages(trace)
    cols = st.columns(2)
    for index, stage in enumerate(stages):
        with cols[index % 2]:
            st.markdown(f"**{stage.name}**")
            st.dataframe(
                pd.DataFrame(stage_rows(stage)),
                hide_index=True,
                width="stretch",
                key=f"audit_stage_{index}",
            )
    left, right = st.columns(2)
    with left:
        st.markdown("**Prompt as rendered**")
        prompt = trace.prompt
        if isinstance(prompt, list) and prompt:
            show_messages(
                [
                    {"role": str(m.get("role")), "content": str(m.get("content"))}
                    for m in prompt
                    if isinstance(m, dict)
                ]
            )
        else:
            st.caption("not rendered")
    with right:
        st.markdown("**Output**")
        if trace.output is not None:
            st.code(trace.output, language=None, wrap_lines=True)
        else:
            st.caption("no output")


def main() -> None:
    require_shell("pages/audit.py")
    st.title("Audit")
    wb = get_workbench()
    # A link followed (or Back): show its trace, once per change of the address.
    wanted = ADDRESS.followed().get("trace")
    if wanted:
        st.session_state[TRACE_CHOICE] = wanted
        st.session_state["audit_trace_text"] = ""  # a trace typed before would win over it
    chain_status(wb)
    # The trace goes above the events (a link lands on it), but a row picked in the
    # table below chooses it: the box is filled once the table has run.
    trace_box = st.container()
    st.subheader("Events")
    where, newest_first = filters(wb)
    events_table(wb, where, newest_first)
    chosen = st.session_state.get(TRACE_CHOICE)
    with trace_box:
        if chosen:
            trace_view(wb, chosen)
        else:
            st.caption(
                "Pick an item's event in the table below, or follow a trace link "
                "from the Runs or Compare page, to see its trace."
            )


main()
