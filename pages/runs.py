"""Runs: start a run from a YAML spec (or add its schedule), see the schedules, watch runs
live, compare their variants, cancel, resume, and open any item (inputs, messages sent,
params, output, error, attempts).

Deep link: `?run=RUN_ID&item=KEY` opens that run and item.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import streamlit as st

from promptlab.checks.validation import CheckStatus
from promptlab.errors import PromptlabError
from promptlab.facades.runs import RunView
from promptlab.records import ItemPage, ItemStatus, RunWithCounts
from promptlab.records.sessions import SessionTurn
from promptlab.ui.downloads import download_buttons
from promptlab.ui.estimate import show_estimate
from promptlab.ui.resources import get_workbench
from promptlab.ui.shell import require_shell
from promptlab.ui.widgets import escape_markdown, show_error, show_messages
from promptlab.views.item import ItemView
from promptlab.workbench import Workbench

#: How often the live panel polls; each poll reads one snapshot of the store.
POLL_EVERY = timedelta(seconds=1)
#: Items per page of the items table.
ITEMS_PAGE = 50
ALL = "all"
#: (run id, item key) of the item opened, kept across polls and runs picked.
ITEM_CHOICE = "item_choice"
EXAMPLE_SPEC = """\
name: triage-production-vs-staging
dataset: data/demo/tickets.csv   # CSV or JSONL; relative to the project folder
variants:                        # every row goes through every variant
  - name: production
    prompt: ticket-triage@production
  - name: staging
    prompt: ticket-triage@staging
limits:
  sim: {rpm: 600, concurrency: 8}   # caps this run only
"""


def start_form(wb: Workbench) -> None:
    with st.expander("Start a run from a YAML spec", icon=":material/play_arrow:"):
        text = st.text_area(
            "Run spec (YAML)",
            EXAMPLE_SPEC,
            height=220,
            key="spec_text",
            help=f"Datasets are read from {wb.settings.data_dir} only; endpoints a spec adds "
            "have no key and must be on this machine (see the README's Security section).",
        )
        buttons = st.container(horizontal=True)
        start = buttons.button(
            "Start run",
            type="primary",
            key="start_run",
            help='A spec with `schedule: "0 2 * * *"` (cron, UTC) is added as a schedule '
            "instead; with `after: [NAME]` the run waits for the newest run of each name to "
            "complete, and is skipped if one fails.",
        )
        estimate = buttons.button(
            "Estimate",
            key="estimate_run",
            help="Requests, units per variant, tokens, cost and time, before anything is "
            "sent. A split's rows are assigned as the run will assign them, so the split "
            "shown is the one the run gives; it warns when a variant gets too few units.",
        )
        if estimate:
            try:
                show_estimate(wb.runs.estimate(wb.runs.parse_spec(text)))
            except PromptlabError as exc:
                show_error(exc)
        if start:
            try:
                spec = wb.runs.parse_spec(text)
                if spec.schedule is not None:
                    added = wb.schedules.add(spec)
                    st.success(
                        f"Scheduled {added.name} ({added.cron}, UTC): next run at "
                        f"{_when(added.next_at)}",
                        icon=":material/schedule:",
                    )
                    return
                run_id = wb.runs.start(spec)
            except PromptlabError as exc:
                show_error(exc)
            else:
                # Follow the new run: `live` picks it before its selectbox is drawn, so a
                # refresh in flight with the old choice cannot win.
                st.session_state["follow_run"] = run_id
                st.success(f"Started {run_id}", icon=":material/check_circle:")


def schedules(wb: Workbench) -> None:
    """Every schedule, when it next fires and how its last run went; pause, resume, remove."""
    listed = wb.schedules.list()
    title = f"Schedules ({len(listed)})"
    with st.expander(title, icon=":material/schedule:", expanded=bool(listed)):
        if not listed:
            st.caption(
                'A spec with `schedule: "0 2 * * *"` (cron, UTC), started above or added with '
                "`promptlab schedule add FILE`, is submitted each time it falls due while the "
                "app or `promptlab serve` runs."
            )
            return
        st.dataframe(
            pd.DataFrame(
                {
                    "schedule": s.name,
                    "cron (UTC)": s.cron,
                    "state": "paused" if s.paused else "active",
                    "next run": _when(s.next_at),
                    "last run": s.last_run_id,
                    "last status": s.last_status,
                    "after": ", ".join(s.after),
                    "last error": s.last_error,
                }
                for s in listed
            ),
            hide_index=True,
            width="stretch",
        )
        row = st.container(horizontal=True, vertical_alignment="bottom")
        name = row.selectbox("Schedule", [s.name for s in listed], key="schedule_choice")
        chosen = next(s for s in listed if s.name == name)
        if chosen.paused:
            if row.button("Resume", key="schedule_resume", icon=":material/play_arrow:"):
                _act(wb.schedules.resume, name)
        elif row.button("Pause", key="schedule_pause", icon=":material/pause:"):
            _act(wb.schedules.pause, name)
        if row.button("Remove", key="schedule_remove", icon=":material/delete:"):
            _act(wb.schedules.remove, name)


def _act(change: Callable[[str], Any], name: str) -> None:
    """Do `change(name)` (a run's or a schedule's), then show the page again; a
    refusal is shown instead."""
    try:
        change(name)
    except PromptlabError as exc:
        show_error(exc)
    else:
        st.rerun()


def _when(at: datetime | None) -> str:
    return "-" if at is None else f"{at:%Y-%m-%d %H:%M} UTC"


def runs_table(runs: list[RunWithCounts]) -> None:
    st.dataframe(
        pd.DataFrame(
            {
                "run": r.run.run_id,
                "name": r.run.name,
                "status": r.run.state,
                "closed": r.items.finished / r.run.total_items if r.run.total_items else 0.0,
                "succeeded": r.items.succeeded,
                "failed": r.items.failed,
                "cancelled": r.items.cancelled,
                "items": r.run.total_items,
                "submitted": r.run.submitted_at,
            }
            for r in runs
        ),
        column_config={
            "closed": st.column_config.ProgressColumn(
                min_value=0, max_value=1, help="items with their final row"
            )
        },
        hide_index=True,
        width="stretch",
    )


@st.fragment(run_every=POLL_EVERY)
def live(wb: Workbench) -> None:
    """The runs list and the chosen run, refreshed together so their figures agree."""
    listed = wb.runs.list()
    if not listed:
        st.info("No runs yet.", icon=":material/info:")
        return
    runs_table(listed)
    labels = {
        r.run.run_id: f"{r.run.name} · {r.run.submitted_at:%Y-%m-%d %H:%M:%S} · {r.run.run_id}"
        for r in listed
    }
    if st.session_state.get("follow_run") in labels:
        st.session_state["run_choice"] = st.session_state.pop("follow_run")
    if st.session_state.get("run_choice") not in labels:
        st.session_state.pop("run_choice", None)
    selected = st.selectbox("Run", list(labels), format_func=labels.__getitem__, key="run_choice")
    _link(run=selected)
    run_detail(wb, selected)


def run_detail(wb: Workbench, run_id: str) -> None:
    view = wb.runs.view(run_id)
    st.subheader(f"{escape_markdown(view.run.name)} · {view.run.state}")  # a spec names it
    if view.run.process_gone:
        st.warning(
            "The process that ran this run is gone (stopped or killed) before it finished. "
            f"Its stored results are kept; go on with **Resume** below or "
            f"`{view.run.resume_command}`.",
            icon=":material/warning:",
        )
    if view.reason:
        st.text(view.reason)
    alerts(view)
    after_run(view)
    c = view.counts
    st.progress(
        view.fraction_closed,
        text=f"{c.finished} of {view.total} items closed: {c.succeeded} succeeded, "
        f"{c.failed} failed, {c.cancelled} cancelled",
    )
    cols = st.columns(7)
    cols[0].metric("Queued", c.pending)
    cols[1].metric("In flight", c.in_flight)
    cols[2].metric("Succeeded", c.succeeded)
    cols[3].metric("Failed", c.failed)
    cols[4].metric("Cancelled", c.cancelled)
    cols[5].metric("Throughput", _rate(view))
    cols[6].metric("ETA", f"{view.eta_s:.0f} s" if view.eta_s is not None else "–")
    if view.limiters:
        st.dataframe(
            pd.DataFrame(
                {
                    "endpoint": s.name,
                    "rpm now": s.rpm,
                    "tpm now": s.tpm,
                    "rate factor": s.rate_factor,
                    "concurrency": s.concurrency,
                    "in flight": s.in_flight,
                    "waiting": s.waiting,
                    "gate closed until": s.gate_closed_until,
                    "429s": s.throttles,
                }
                for s in view.limiters
            ),
            hide_index=True,
            width="stretch",
        )
    outcome(view)
    variants(wb, view)
    scores(wb, view.run_id)
    per_session(wb, view.run_id)
    field_failures(view)
    failures(view)
    actions(wb, view)
    items(wb, view)


def alerts(view: RunView) -> None:
    """Anomalies seen in the results (a burst of failures, a field gone empty, ...)."""
    for alert in view.alerts:
        # The message names the variant and the output field (a spec's and a schema's).
        st.warning(escape_markdown(f"{alert.kind}: {alert.message}"), icon=":material/warning:")


def after_run(view: RunView) -> None:
    """After-run work that failed (scores, a judge, a cross-check), each with its why."""
    for line in view.after_run_failures:
        st.error(escape_markdown(f"After-run work failed: {line}"), icon=":material/error:")


def outcome(view: RunView) -> None:
    """What the stored results add up to: attempts, tokens, cost, latency."""
    s = view.summary
    cols = st.columns(6)
    cols[0].metric("Attempts", s.attempts, help="every request sent, retries included")
    cols[1].metric("429s", s.rate_limited_attempts)
    tokens = s.input_tokens + s.output_tokens
    cols[2].metric("Tokens", tokens, help=f"{s.input_tokens} in, {s.output_tokens} out")
    cols[3].metric("Cost", f"${s.cost_usd:.4f}", help="from the providers file's prices")
    cols[4].metric("Latency p50", _ms(s.latency_p50_ms))
    cols[5].metric("Latency p95", _ms(s.latency_p95_ms))


def variants(wb: Workbench, view: RunView) -> None:
    """The variants side by side: an A/B run told apart, and its metrics to download."""
    st.markdown("**Per variant**")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": v.name,
                "prompt": v.prompt_ref,
                "model": f"{v.endpoint}:{v.model}",
                "succeeded": v.succeeded,
                "failed": v.failed,
                "cancelled": v.cancelled,
                "open": v.open,
                "completion": v.completion_rate,
                "valid": v.validity_rate,
                "repaired": v.repair_rate,
                "invalid": v.invalid_rate,
                "truncated": v.truncation_rate,
                "rules failed": v.rule_failure_rate,
                "p50 ms": v.latency_p50_ms,
                "p90 ms": v.latency_p90_ms,
                "p99 ms": v.latency_p99_ms,
                "tokens": v.input_tokens + v.output_tokens,
                "cost $": v.cost_usd,
            }
            for v in view.variants
        ),
        column_config={
            "completion": st.column_config.NumberColumn(
                format="percent",
                help="items that succeeded with a usable output (valid, repaired, or no "
                "output schema) / finished items",
            ),
            "valid": st.column_config.NumberColumn(
                format="percent", help="outputs that fit the output schema as written"
            ),
            "repaired": st.column_config.NumberColumn(
                format="percent", help="outputs that fit the schema once repaired"
            ),
            "invalid": st.column_config.NumberColumn(
                format="percent", help="outputs that break the schema or hold no JSON"
            ),
            "truncated": st.column_config.NumberColumn(
                format="percent", help="outputs cut off at the token limit"
            ),
            "rules failed": st.column_config.NumberColumn(
                format="percent", help="outputs that failed a rule of severity error"
            ),
            "p50 ms": st.column_config.NumberColumn(format="%.0f"),
            "p90 ms": st.column_config.NumberColumn(format="%.0f"),
            "p99 ms": st.column_config.NumberColumn(format="%.0f"),
            "cost $": st.column_config.NumberColumn(format="%.4f"),
        },
        hide_index=True,
        width="stretch",
        key=f"variants_{view.run_id}",
    )
    download_buttons(
        wb, "metrics", key=f"download_metrics_{view.run_id}", label="Download metrics",
        run_id=view.run_id,
    )  # fmt: skip


def per_session(wb: Workbench, run_id: str) -> None:
    """A replayed conversation log per session (nothing for any other run)."""
    rows = wb.analysis.sessions(run_id)
    if not rows:
        return
    st.markdown("**Per session** (a session completes when every turn does)")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": s.variant,
                "sessions": s.sessions,
                "completed": s.completion,
                "95% interval": f"{s.interval.low:.1%} - {s.interval.high:.1%}"
                if s.interval
                else None,
                "turns per session": round(s.turns_per_session, 1),
                "session latency p50 ms": s.latency_p50_ms,
                "session latency p90 ms": s.latency_p90_ms,
                **{f"score: {name}": mean for name, mean in s.scores.items()},
            }
            for s in rows
        ),  # fmt: skip
        column_config={"completed": st.column_config.NumberColumn(format="percent")},
        hide_index=True,
        width="stretch",
        key=f"sessions_{run_id}",
    )
    context_shards(wb, run_id)


def context_shards(wb: Workbench, run_id: str) -> None:
    """The shards the replay's long sessions were cut into (when any were)."""
    shards = wb.runs.shards(run_id)
    if not shards:
        return
    summaries = [s for s in shards if s.summary is not None]
    label = f"Context shards ({len(shards)}, {len(summaries)} carrying a summary)"
    with st.expander(label):
        st.caption("A session whose history outgrew the model's window, cut to fit: each "
                   "turn was sent with its shard (messages counted from 1).")  # fmt: skip
        st.dataframe(
            pd.DataFrame(
                {
                    "session": s.session_id,
                    "variant": s.variant,
                    "shard": s.seq_no + 1,
                    "final": s.is_final,
                    "messages": f"{s.first_message + 1}-{s.last_message + 1}",
                    "tokens": s.tokens,
                    "cut at": s.cut,
                    "summary": s.summary,
                    "summary tokens": s.summary_tokens,
                    "expires": s.expires_at,
                }
                for s in shards
            ),  # fmt: skip
            hide_index=True,
            width="stretch",
            key=f"shards_{run_id}",
        )


def scores(wb: Workbench, run_id: str) -> None:
    """Each scorer's mean per variant against the spec's expected answers (if any)."""
    counts = wb.analysis.scores(run_id)
    if not counts:
        return
    st.markdown("**Scores against expected answers**")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": c.label,
                "scorer": c.scorer,
                "score": c.mean,
                "95% interval": (
                    f"{c.interval.low:.1%} - {c.interval.high:.1%}" if c.interval else None
                ),
                "scored": c.scored,
                "no output": c.no_output,
                "malformed": c.malformed,
                "no expected": c.no_expected,
                "not judged": c.not_judged,
            }
            for c in counts
        ),
        column_config={
            "score": st.column_config.NumberColumn(
                format="percent",
                help="the mean score (an accuracy when each is right or wrong); failed "
                "requests and unreadable outputs score 0, rows with no expected value none",
            ),
        },
        hide_index=True,
        width="stretch",
        key=f"scores_{run_id}",
    )


def field_failures(view: RunView) -> None:
    """Which output paths fail their check most, per variant."""
    if not view.field_failures:
        return
    st.markdown("**Output fields that fail most**")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": f.variant,
                "path": f.path,
                "outputs": f.outputs,
                "most common error": f.example,
            }
            for f in view.field_failures
        ),
        hide_index=True,
        width="stretch",
        key=f"fields_{view.run_id}",
    )


def failures(view: RunView) -> None:
    if not view.failures:
        return
    kinds = ", ".join(f"{kind} {count}" for kind, count in view.failure_kinds.items())
    st.markdown(f"**First failed items** ({escape_markdown(kinds)})")
    st.dataframe(
        pd.DataFrame(
            {
                "dataset row": f.row_index + 1,
                "variant": f.variant,
                "kind": f.error_kind,
                "message": f.message,
            }
            for f in view.failures
        ),
        hide_index=True,
        width="stretch",
    )


def actions(wb: Workbench, view: RunView) -> None:
    left, middle, right, _ = st.columns([1, 1, 1, 3])
    if left.button("Cancel", disabled=not view.can_cancel, key=f"cancel_{view.run_id}"):
        wb.runs.cancel(view.run_id)
        st.rerun()
    if middle.button(
        "Pause",
        disabled=not view.can_pause,
        key=f"pause_{view.run_id}",
        help="Stop sending now; requests in flight finish, the rest wait for Resume.",
    ):
        _act(wb.runs.pause, view.run_id)
    if right.button("Resume", disabled=not view.can_resume, key=f"resume_{view.run_id}"):
        _act(wb.runs.resume, view.run_id)


def items(wb: Workbench, view: RunView) -> None:
    """The run's items, filtered and paged; the one picked is opened below the table."""
    run_id = view.run_id
    st.markdown("**Items**")
    cols = st.columns(5)
    status = cols[0].selectbox("Status", [ALL, *ItemStatus], key=f"items_status_{run_id}")
    variant = cols[1].selectbox(
        "Variant", [ALL, *(v.name for v in view.variants)], key=f"items_variant_{run_id}"
    )
    kind = cols[2].selectbox("Error kind", [ALL, *view.failure_kinds], key=f"items_kind_{run_id}")
    check = cols[3].selectbox(
        "Check", [ALL, *CheckStatus], key=f"items_check_{run_id}",
        help="What the output check found (outputs of a template with an output schema).",
    )  # fmt: skip
    search = cols[4].text_input(
        "Search", key=f"items_search_{run_id}", help="A key prefix, or text in the dataset "
        "row, the output or the error (any case).",
    )  # fmt: skip
    filters = (status, variant, kind, check, search.strip())
    # Keys carry the filters: a new filter starts at page 1 with nothing selected.
    scope = f"{run_id}_{zlib.crc32(repr(filters).encode()):08x}"
    page_no = st.session_state.get(f"items_page_{scope}", 1)
    try:
        page = wb.runs.items(
            run_id,
            status=None if status == ALL else status,
            variant=None if variant == ALL else variant,
            error_kind=None if kind == ALL else kind,
            check=None if check == ALL else check,
            search=filters[4] or None,
            offset=(page_no - 1) * ITEMS_PAGE,
            limit=ITEMS_PAGE,
        )
    except PromptlabError as exc:
        show_error(exc)
        return
    picked = items_table(page, f"items_table_{scope}_{page_no}")
    if page.total > ITEMS_PAGE:
        pages = -(-page.total // ITEMS_PAGE)
        st.pagination(pages, key=f"items_page_{scope}")
    # Every item of the run (the filters above page the view, not the file).
    cols = st.columns(2)
    with cols[0]:
        download_buttons(wb, "items", key=f"download_items_{run_id}", run_id=run_id)
    with cols[1]:
        download_buttons(wb, "results", key=f"download_results_{run_id}", run_id=run_id)
    if picked is not None:
        st.session_state[ITEM_CHOICE] = (run_id, picked)
    choice = st.session_state.get(ITEM_CHOICE)
    if choice and choice[0] == run_id:
        _link(run=run_id, item=choice[1])
        item_detail(wb, run_id, choice[1])


def items_table(page: ItemPage, key: str) -> str | None:
    """The page as a table to pick from; the key of a row picked now, else None."""
    st.caption(
        f"{page.total} items" if page.total <= len(page.rows) else
        f"items {page.offset + 1}-{page.offset + len(page.rows)} of {page.total}"
    )  # fmt: skip
    if not page.rows:
        return None
    event = st.dataframe(
        pd.DataFrame(
            {
                "key": r.key,
                "row": r.row_index + 1,
                "variant": r.variant,
                "repeat": r.repeat,
                "status": r.status,
                "error": r.error_kind,
                "check": r.check_status,
                "attempts": r.attempts,
                "latency ms": r.latency_ms,
                "output": r.output_preview,
                "finished": r.finished_at,
            }
            for r in page.rows
        ),
        column_config={"latency ms": st.column_config.NumberColumn(format="%.0f")},
        hide_index=True,
        width="stretch",
        key=key,
        on_select="rerun",
        selection_mode="single-row",
    )
    rows = list(event.selection.rows)
    # A selection is taken once, when it changes: the table refreshes every poll, and a
    # row index kept from an earlier click must not open whichever item moved there.
    seen = st.session_state.get("_items_seen")
    st.session_state["_items_seen"] = (key, rows)
    if rows and seen != (key, rows) and rows[0] < len(page.rows):
        return page.rows[rows[0]].key
    return None


def item_detail(wb: Workbench, run_id: str, key: str) -> None:
    """How one item came to be: inputs, messages sent, params, output, error, attempts."""
    try:
        item = wb.runs.item(run_id, key)
    except PromptlabError as exc:
        show_error(exc)
        return
    v = item.variant
    st.markdown(f"**Item** `{item.key}` · {item.status}")
    st.markdown(f":material/verified: [Open its audit trace](audit?trace={item.key})")
    st.caption(
        escape_markdown(
            f"dataset row {item.detail.row_index + 1} · variant {v.name} ({v.prompt_ref}, "
            f"{v.prompt_version_id[:19]}) · {v.endpoint}:{v.model} · repeat {item.detail.repeat}"
        )
    )
    left, right = st.columns(2)
    with left:
        st.markdown("Inputs")
        st.dataframe(
            pd.DataFrame(
                {"variable": name, "value": value if isinstance(value, str) else repr(value)}
                for name, value in item.inputs.items()
            ),
            hide_index=True,
            width="stretch",
        )
        st.markdown("Params")
        st.json(dict(item.params), expanded=True)
    with right:
        st.markdown("Messages sent")
        if item.messages is not None:
            show_messages(item.messages)
        else:
            show_error(f"not sent: {item.render_error}")
    item_outcome(item)
    session_turns(wb, run_id, item.key)
    if item.result is not None:
        rating(wb, run_id, item.key)


def session_turns(wb: Workbench, run_id: str, key: str) -> None:
    """A replayed turn's whole session: each finished turn's user message and answer."""
    turns = wb.runs.session(run_id, key)
    if not turns:
        return
    with st.expander(f"The whole session ({len(turns)} turns finished)", expanded=True):
        for turn in turns:
            with st.chat_message("user"):
                st.markdown(escape_markdown(turn.user or "(the log is no longer here)"))
            with st.chat_message("assistant"):
                here = (
                    " · this item"
                    if turn.key == key
                    else f" · [open](?run={run_id}&item={turn.key})"
                )
                st.caption(f"row {turn.row_index + 1} · {turn.status} · {turn.attempts} "
                           f"attempt(s){shard_label(turn)}{here} · `{turn.key[:12]}`")  # fmt: skip
                st.markdown(escape_markdown(turn.output or turn.error or "(no output)"))


def shard_label(turn: SessionTurn) -> str:
    """Which context shard a turn was sent with, if its history was cut to fit."""
    if turn.shard_id is None:
        return ""
    if turn.shard is None:
        return f" · shard `{turn.shard_id[:8]}` (expired)"
    return f" · shard {turn.shard + 1}"


#: The ratings a reviewer can give a result here, as (feedback kind, button label).
RATINGS = (
    ("thumbs_up", ":material/thumb_up: Good"),
    ("thumbs_down", ":material/thumb_down: Bad"),
    ("click", ":material/ads_click: Would click"),
)


def rating(wb: Workbench, run_id: str, key: str) -> None:
    """Rate the output: a feedback event (source `app:<author>`) that the metrics and
    Compare count with imported feedback; one thumb per person and result."""
    st.markdown(
        "Rate this output",
        help="One thumb per person and result: Good again changes nothing, Bad replaces "
        "your Good (and the other way round). Each Would click counts.",
    )
    cols = st.columns(len(RATINGS) + 1)
    for col, (kind, label) in zip(cols, RATINGS, strict=False):
        if col.button(label, key=f"rate_{kind}_{key}"):
            try:
                wb.analysis.rate_result(run_id, key, kind)
            except PromptlabError as exc:
                show_error(exc)
    counts = wb.analysis.result_feedback(run_id, key)
    cols[-1].caption(
        " · ".join(f"{kind.replace('_', ' ')} {n}" for kind, n in sorted(counts.items()))
        or "no feedback yet"
    )


def item_outcome(item: ItemView) -> None:
    st.markdown("Output")
    if item.output_json is not None:
        st.json(item.output_json, expanded=True)
    elif item.output_text is not None:
        st.code(item.output_text, language=None, wrap_lines=True)
    else:
        st.caption("no output" if item.status.is_final else "not finished yet")
    if item.error is not None:
        kind, message = item.error
        show_error(f"{kind}: {message}" if kind else message)
    item_check(item)
    r = item.result
    if r is not None and r.status == ItemStatus.SUCCEEDED:
        cols = st.columns(5)
        cols[0].metric("Tokens in", r.input_tokens)
        cols[1].metric("Tokens out", r.output_tokens)
        cols[2].metric("Cost", f"${r.cost_usd or 0:.6f}")
        cols[3].metric("Latency", _ms(r.latency_ms))
        # Both as the provider said them: text, not Markdown.
        cols[4].metric(
            "Finish", escape_markdown(r.finish_reason or "–"),
            help=escape_markdown(f"model {r.model_version}"),
        )  # fmt: skip
    st.markdown(f"Attempts ({len(item.attempts)})")
    if item.attempts:
        st.dataframe(
            pd.DataFrame(
                {
                    "attempt": a.attempt,
                    "started": a.started_at,
                    "ended": a.ended_at,
                    "outcome": a.outcome + (" (re-ask)" if a.reask else ""),
                    "kind": a.error_kind,
                    "http": a.http_status,
                    "wait ms": a.wait_ms,
                    "waited for": a.wait_reason,
                    "retry-after s": a.retry_after_s,
                    "latency ms": a.latency_ms,
                    "message": a.error_message,
                }
                for a in item.attempts
            ),
            column_config={
                "wait ms": st.column_config.NumberColumn(format="%.0f"),
                "latency ms": st.column_config.NumberColumn(format="%.0f"),
            },
            hide_index=True,
            width="stretch",
        )


def item_check(item: ItemView) -> None:
    """The output check: its status and every error by path; then the rules' verdict."""
    item_rules(item)
    status = item.check_status
    if status is None:
        return
    if status in (CheckStatus.VALID, CheckStatus.NO_SCHEMA):
        st.caption(f"check: {status}")
        return
    if status == CheckStatus.REPAIRED:
        st.info("check: repaired (the output needed repair before it fit the schema)")
        return
    show_error(f"check: {status}, {len(item.check_errors)} errors")
    # Every error by its path, as stored; code keeps `$.items[2]` and quotes literal.
    st.code("\n".join(item.check_errors), language=None, wrap_lines=True)


def item_rules(item: ItemView) -> None:
    if item.rule_status is None:
        return
    if item.rule_status == "passed":
        st.caption("rules: passed")
        return
    failed = f"rules: {item.rule_status}, {len(item.rule_errors)} not met"
    if item.rule_status == "failed":
        show_error(failed)
    else:
        st.warning(failed, icon=":material/warning:")
    st.code("\n".join(item.rule_errors), language=None, wrap_lines=True)


def deep_link() -> None:
    """`?run=RUN_ID&item=KEY`: open that run and item, once per session."""
    if st.session_state.get("_deep_link_done"):
        return
    st.session_state["_deep_link_done"] = True
    run_id = st.query_params.get("run")
    if run_id:
        st.session_state["run_choice"] = run_id
        item = st.query_params.get("item")
        if item:
            st.session_state[ITEM_CHOICE] = (run_id, item)


def _link(run: str, item: str | None = None) -> None:
    """Keep the address bar on what is shown, so it can be shared as a deep link."""
    current = st.query_params.to_dict()
    if item is None and current.get("run") == run:
        return  # the same run: its item link stays until another item is opened
    wanted = {"run": run, **({"item": item} if item else {})}
    if current != wanted:
        st.query_params.from_dict(wanted)


def _rate(view: RunView) -> str:
    return f"{view.throughput_per_s:.1f}/s" if view.throughput_per_s is not None else "–"


def _ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else "–"


require_shell("pages/runs.py")
st.title("Runs")
workbench = get_workbench()
start_form(workbench)
schedules(workbench)
deep_link()
live(workbench)
