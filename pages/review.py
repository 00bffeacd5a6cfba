"""Review: the rows a person settles. Cross-checks send the rows their models disagree
on, and anyone can send a run's rows by hand, its results that failed their checks, or
the results an anomaly alert was about. Each item shows the dataset row and every
model's answer side by side with its scores; accept (A), correct (type the answer,
then Correct) or reject (X), and the next open item comes up. Enter in a field submits
no form here: each form has several fields, and only its buttons send. A decision on an
item someone else settled (or reopened) since it was shown is refused in one line, with
the item as it is now; a settled item is changed only after Reopen. Settled answers
download as a dataset of expected answers: the run picked's, and every run's apart.

Pick the run from the list (`?run=ID` preselects it): the queue and the item on show
are then that run's only. Send its rows as numbers and ranges (`1-5`, `1,3,7-9`),
numbered from 1 as on the Runs page and in the exports' `row_number`; the counts follow
each send and decision at once. A row sent several times (`repeats:`) is one card with
a tab per repeat.

Deep link: `?item=ID`. Rows come from promptlab/views/review.py, the reads and
decisions from `wb.review` (promptlab/facades/review.py).
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

import pandas as pd
import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.records.review import ReviewDetail, ReviewStatus
from promptlab.ui.downloads import file_download
from promptlab.ui.resources import get_workbench
from promptlab.ui.review_cards import answer_cards
from promptlab.ui.review_queue import announce, run_labels, run_picker, send_rows
from promptlab.ui.seen import seen_before
from promptlab.ui.shell import require_shell
from promptlab.ui.widgets import show_error
from promptlab.views.review import crosscheck_line, item_rows, summary_title, weight_rows
from promptlab.workbench import Workbench

#: The item on show: from `?item=`, a row picked in the table, or the next open one
#: (of the run picked, if one is).
CHOSEN = "review_item"
ALL = "all"


def queue(wb: Workbench, runs: dict[str, str]) -> tuple[int | None, str | None]:
    """The filters and the table; the id of the row picked in it, if any, and the run
    picked (None: any run)."""
    counts = wb.review.counts()
    st.caption("  ·  ".join(f"{s} **{counts.get(s, 0)}**" for s in ReviewStatus))
    left, right = st.columns([2, 3])
    status = left.segmented_control(
        "Status", [*ReviewStatus, ALL], default=ReviewStatus.OPEN, key="review_status"
    )
    with right:
        run_id = run_picker(runs)
    items = wb.review.list(None if status in (ALL, None) else status, run_id)
    if not items:
        st.info(
            "Nothing here. Cross-checked runs send the rows their models disagree "
            "on; send rows by hand below.",
            icon=":material/inbox:",
        )
        return None, run_id
    picked = st.dataframe(
        pd.DataFrame(item_rows(items)),
        hide_index=True,
        key="review_table",
        on_select="rerun",
        selection_mode="single-row",
        width="stretch",
    )
    rows = picked.selection.rows if picked else []
    return (items[rows[0]].id if rows else None), run_id


def next_open(wb: Workbench, after: int | None = None, run_id: str | None = None) -> int | None:
    """The first open item after `after` (else the first open one), of `run_id` if given."""
    items = wb.review.list(ReviewStatus.OPEN, run_id, limit=1_000)
    later = [i.id for i in items if after is None or i.id > after]
    return (later or [i.id for i in items] or [None])[0]


def shown_item(wb: Workbench, run_id: str | None) -> ReviewDetail | None:
    """The item on show: the one chosen (a link, a pick, the next after a decision) if
    it is of the run picked, else that run's first open item (any run's, none picked).
    Kept on show until the reviewer moves on: a click must reach the item it was made
    on even if someone else settled it meanwhile (then it is refused, in view)."""
    chosen = st.session_state.get(CHOSEN) or next_open(wb, run_id=run_id)
    if chosen is None:
        return None
    st.session_state[CHOSEN] = chosen
    try:
        detail = wb.review.show(chosen)
        if run_id is None or detail.item.run_id == run_id:
            return detail
        chosen = st.session_state[CHOSEN] = next_open(wb, run_id=run_id)
        return None if chosen is None else wb.review.show(chosen)
    except PromptlabError as exc:
        show_error(exc)
        return None


def item_view(wb: Workbench, detail: ReviewDetail, run_id: str | None) -> None:
    item = detail.item
    st.subheader(f"Item {item.id}: run `{item.run_id}`, row {item.row_index + 1}")
    st.caption(f"{item.status} · sent by {item.source} ({item.created_by}): {item.reason}")
    line = crosscheck_line(detail)
    if line:
        st.caption(line)
    with st.expander("Dataset row", expanded=True):
        st.dataframe(pd.DataFrame([detail.row]), hide_index=True)
    answer_cards(detail)
    decide(wb, detail, run_id)


def decide(wb: Workbench, detail: ReviewDetail, run_id: str | None) -> None:
    """Accept (A), correct (the answer typed, then Correct) or reject (X) an open item;
    reopen a settled one; then the next open item (of `run_id`, if picked). Each names
    the version shown before the click: one someone changed meanwhile is refused in one
    line, and the page shows the item as it is now. Enter in a field sends nothing."""
    item = detail.item
    seen = seen_before(f"review_item_{item.id}", item.version)
    if item.decided_by:
        st.success(f"{item.status} by {item.decided_by}: {item.answer!r}", icon=":material/done:")
    with st.form(f"review_form_{item.id}", border=False, enter_to_submit=False):
        answer = st.text_input(
            "Answer",
            value=item.answer or item.proposed or "",
            key=f"review_answer_{item.id}",
            help="Type the right answer, then **Correct**.",
        )
        note = st.text_input("Note (optional)", key=f"review_note_{item.id}")
        with st.container(horizontal=True):
            corrected = st.form_submit_button("Correct", icon=":material/edit:")
            accepted = st.form_submit_button(
                "Accept proposed", type="primary", shortcut="A", disabled=item.proposed is None
            )
            rejected = st.form_submit_button("Reject", shortcut="X")
            reopened = item.status != ReviewStatus.OPEN and st.form_submit_button(
                "Reopen", icon=":material/undo:", help="Open the item again to decide it anew"
            )
    try:
        if accepted:
            wb.review.accept(item.id, note or None, version=seen)
        elif rejected:
            wb.review.reject(item.id, note or None, version=seen)
        elif corrected:
            wb.review.correct(item.id, answer, note or None, version=seen)
        elif reopened:
            wb.review.reopen(item.id, note or None, version=seen)
            st.rerun()  # the same item, open again
        else:
            return
    except PromptlabError as exc:
        show_error(exc)
        return
    st.session_state[CHOSEN] = next_open(wb, item.id, run_id)
    st.rerun()


def settled_download(wb: Workbench, run_id: str | None) -> None:
    """Settled answers as a dataset: of the run picked (as the queue shows), and of
    every run as a separate choice; beside each button, what its file holds."""
    for run in dict.fromkeys([run_id, None]):
        counts = wb.review.counts(run)
        settled = counts.get(ReviewStatus.ACCEPTED, 0) + counts.get(ReviewStatus.CORRECTED, 0)
        shown = run == run_id
        whose = "Settled answers" if shown else "Every run's settled answers"
        file_download(
            "review_export" if shown else "review_export_all",
            f"{whose} as a dataset ({settled} rows)",
            partial(settled_bytes, wb, run),
            what=(run, settled),
            file_name=f"expected-answers{f'-{run}' if run else ''}.jsonl",
            mime="application/x-ndjson",
            help="Each reviewed row as it was, its settled answer in `expected`: "
            "import it and name `expected: expected` in the next run spec.",
            caption=f"{settled} settled answers: {f'run {run}' if run else 'every run'}",
        )


def settled_bytes(wb: Workbench, run_id: str | None) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "expected.jsonl"
        wb.review.export(path, run_id=run_id)
        return path.read_bytes()


def main() -> None:
    require_shell("pages/review.py")
    st.title("Review")
    wb = get_workbench()
    linked = st.query_params.get("item")
    if linked and st.session_state.get("_review_link") != linked:
        st.session_state["_review_link"] = linked
        st.session_state[CHOSEN] = int(linked) if linked.isdigit() else None
    announce()
    runs = run_labels(wb, also=st.query_params.get("run"))
    picked, run_id = queue(wb, runs)
    if picked is not None:
        st.session_state[CHOSEN] = picked
    detail = shown_item(wb, run_id)
    if detail is not None:
        summary = wb.review.crosscheck(detail.item.run_id)
        if summary is not None:
            with st.expander(summary_title(summary)):
                st.dataframe(pd.DataFrame(weight_rows(summary)), hide_index=True)
        item_view(wb, detail, run_id)
    send_rows(wb, runs, run_id)
    settled_download(wb, run_id)


main()
