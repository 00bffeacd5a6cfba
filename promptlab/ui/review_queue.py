"""The Review page's run picker and its form sending rows to review: runs picked from a
list (newest first, `?run=` preselecting one), rows typed as numbers and ranges (from
1, as the Runs page numbers them), and what was sent said after the page has redrawn
with the new counts. Enter in a field of the form sends nothing: its buttons do."""

from __future__ import annotations

import streamlit as st

from promptlab.data.row_numbers import EXAMPLE, row_indexes
from promptlab.errors import PromptlabError
from promptlab.facades.review import MAX_ADDED
from promptlab.ui.address import Address
from promptlab.ui.widgets import show_error
from promptlab.workbench import Workbench

#: The queue's run (a run id; "" for any run).
RUN = "review_run"
#: What the last send did, said once the page has redrawn with it.
SENT = "review_sent"
#: Runs offered in the pickers, newest first.
RUNS_LISTED = 200
#: `?run=` preselects the queue's run whenever the address changes (ui/address.py).
_ADDRESS = Address("review", "run")


def run_labels(wb: Workbench, also: str | None = None) -> dict[str, str]:
    """Run id -> "name · run id · N results", newest first; `also` (a linked run not
    among the newest) listed by its id."""
    labels = {
        r.run.run_id: f"{r.run.name} · {r.run.run_id} · {r.items.finished:,} results"
        for r in wb.runs.list(RUNS_LISTED)
    }
    if also and also not in labels:
        labels[also] = also
    return labels


def run_picker(labels: dict[str, str]) -> str | None:
    """The run whose items the queue lists (None: any run). `?run=` preselects one when
    the address names it, and the address follows the pick."""
    _ADDRESS.open_choice("run", RUN, labels)
    if st.session_state.get(RUN, "") not in ("", *labels):
        st.session_state.pop(RUN)
    picked = st.selectbox(
        "Run", ["", *labels], key=RUN, format_func=lambda r: labels.get(r, "any run")
    )
    _ADDRESS.put("run", picked or None)  # `item=` stays: the reviewer's place in the queue
    return picked or None


def announce() -> None:
    """Say what the last send did: after the rerun, so the counts drawn agree with it."""
    message = st.session_state.pop(SENT, None)
    if message:
        st.toast(message, icon=":material/inbox:")


def send_rows(wb: Workbench, labels: dict[str, str], current: str | None) -> None:
    """Send rows of a run to review: by number and range, the results that failed their
    checks, or what the run's alerts were about. The page redraws after a send."""
    with st.expander("Send rows to review"):
        if not labels:
            st.caption("No runs yet: rows are sent from a run's results.")
            return
        runs = list(labels)
        with st.form("review_send", enter_to_submit=False):
            run_id = st.selectbox(
                "From run",
                runs,
                format_func=labels.__getitem__,
                index=runs.index(current) if current in runs else 0,
            )
            rows = st.text_input(
                "Rows",
                placeholder=f"{EXAMPLE} (at most {MAX_ADDED:,})",
                help="Numbered from 1, as the Runs page and the exports' `row_number` number them.",
            )
            reason = st.text_input("Reason", value="sent by hand")
            cols = st.columns(3)
            by_hand = cols[0].form_submit_button("Send these rows")
            checks = cols[1].form_submit_button("Send results that failed checks")
            alerts = cols[2].form_submit_button("Send what alerts were about")
    if not (by_hand or checks or alerts) or run_id is None:
        return
    try:
        if by_hand:
            ids = wb.review.add(run_id, row_indexes(rows, MAX_ADDED), reason)
        elif checks:
            ids = wb.review.add_failed_checks(run_id)
        else:
            ids = wb.review.add_alerted(run_id)
    except PromptlabError as exc:
        show_error(exc)
        return
    st.session_state[SENT] = f"Sent {len(ids)} row(s) to review"
    st.rerun()
