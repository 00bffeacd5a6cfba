"""A run's items on the Runs page: the page of items to pick from, and the item opened
(inputs, messages sent, params, output and its checks, attempts, its session, ratings)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from promptlab.checks.validation import CheckStatus
from promptlab.errors import PromptlabError
from promptlab.records import ItemFilter, ItemPage, ItemStatus
from promptlab.records.sessions import SessionTurn
from promptlab.ui.downloads import download_buttons
from promptlab.ui.drift import item_drift
from promptlab.ui.run_results import ms
from promptlab.ui.widgets import escape_markdown, show_error, show_messages
from promptlab.views.item import ItemView
from promptlab.workbench import Workbench

#: The ratings a reviewer can give a result here, as (feedback kind, button label).
RATINGS = (
    ("thumbs_up", ":material/thumb_up: Good"),
    ("thumbs_down", ":material/thumb_down: Bad"),
    ("click", ":material/ads_click: Would click"),
)


def items_table(page: ItemPage, key: str) -> str | None:
    """The page as a table to pick from; the key of a row picked now, else None."""
    st.caption(
        f"{page.total} items"
        if page.total <= len(page.rows)
        else f"items {page.offset + 1}-{page.offset + len(page.rows)} of {page.total}"
    )
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


def item_downloads(wb: Workbench, run_id: str, shown: ItemFilter, total: int, every: int) -> None:
    """The items and results files of what the list shows (every page of it, not only
    the page on screen), each saying so beside its button ("240 items: variant v20");
    under filters, the run's every item is another choice, named as such."""
    choices = [("", shown, f"{total} items: whole run")]
    if shown.named():
        choices = [
            ("", shown, f"{total} items: {shown.describe()}"),
            ("all_", ItemFilter(), f"{every} items: whole run"),
        ]
    for prefix, kept, caption in choices:
        files = st.columns(2)
        for column, table in zip(files, ("items", "results"), strict=True):
            with column:
                download_buttons(
                    wb,
                    table,
                    key=f"download_{prefix}{table}_{run_id}",
                    label=f"Download {'all ' if prefix else ''}{table}",
                    run_id=run_id,
                    items=kept,
                    caption=caption if table == "items" else f"results of {caption}",
                )


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
    item_drift(wb, item)
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
                st.caption(
                    f"row {turn.row_index + 1} · {turn.status} · {turn.attempts} "
                    f"attempt(s){shard_label(turn)}{here} · `{turn.key[:12]}`"
                )
                st.markdown(escape_markdown(turn.output or turn.error or "(no output)"))


def shard_label(turn: SessionTurn) -> str:
    """Which context shard a turn was sent with, if its history was cut to fit."""
    if turn.shard_id is None:
        return ""
    if turn.shard is None:
        return f" · shard `{turn.shard_id[:8]}` (expired)"
    return f" · shard {turn.shard + 1}"


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
        cols[3].metric("Latency", ms(r.latency_ms))
        # Both as the provider said them: text, not Markdown.
        cols[4].metric(
            "Finish",
            escape_markdown(r.finish_reason or "–"),
            help=escape_markdown(f"model {r.model_version}"),
        )
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
