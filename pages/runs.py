"""Runs: start a run from a YAML spec (or add its schedule), see the schedules, watch runs
live, compare their variants, cancel, resume, and open any item (inputs, messages sent,
params, output, error, attempts).

Deep link: `?run=RUN_ID&item=KEY` opens that run and item (a key prefix will do), also
when the address changes within a session; the address follows what is picked.
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
from promptlab.records import ItemFilter, ItemStatus, RunStatus, RunWithCounts
from promptlab.ui.address import Address
from promptlab.ui.confirm import ask, confirmed
from promptlab.ui.estimate import show_estimate
from promptlab.ui.resources import get_workbench
from promptlab.ui.run_items import item_detail, item_downloads, items_table
from promptlab.ui.run_results import (
    batches,
    failures,
    field_failures,
    limiters,
    outcome,
    per_session,
    scores,
    variants,
)
from promptlab.ui.run_status import run_status
from promptlab.ui.shell import require_shell
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench

#: How often the live panel polls while a run is going; each poll reads one snapshot.
POLL_EVERY = timedelta(seconds=1)
#: ... and while none is (a run started elsewhere shows within it): every second, an idle
#: page ran a script each second, 0.2 s of CPU each (bench/pages.py).
IDLE_POLL_EVERY = timedelta(seconds=5)
#: Items per page of the items table.
ITEMS_PAGE = 50
ALL = "all"
#: (run id, item key) of the item opened, kept across polls and runs picked.
ITEM_CHOICE = "item_choice"
#: The page's address: the run shown and the item opened.
ADDRESS = Address("runs", "run", "item")
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
            ask(f"schedule_remove::{name}")
        question = f"Remove schedule {name}? It fires no more runs; runs it started stay."
        if confirmed(f"schedule_remove::{name}", question, "Yes, remove it", "Keep it"):
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


def live_panel(wb: Workbench) -> None:
    """`live`, polled every second while a run is going, every 5 s while none is."""
    listed = wb.runs.list(include=linked_run())
    going = any(is_going(r) for r in listed)
    # The fragment is called again with these same arguments on each poll: the list
    # read here serves this run only (popped), each poll reads its own.
    st.fragment(live, run_every=POLL_EVERY if going else IDLE_POLL_EVERY)(wb, going, [listed])


def is_going(run: RunWithCounts) -> bool:
    """Not ended, paused, interrupted or waiting for its time: its figures move."""
    status, idle = run.run.status, (RunStatus.PAUSED, RunStatus.SCHEDULED)
    return not (status.is_final or run.run.process_gone or status in idle)


def live(wb: Workbench, polled_going: bool, read: list[list[RunWithCounts]]) -> None:
    """The runs list and the chosen run, refreshed together so their figures agree.

    When a poll finds a run started or the last one ended, the whole page runs again,
    so the fragment is declared with the other pace (`live_panel`)."""
    listed = read.pop() if read else wb.runs.list(include=linked_run())
    if any(is_going(r) for r in listed) != polled_going:
        st.rerun(scope="app")
    if not listed:
        st.info("No runs yet.", icon=":material/info:")
        return
    runs_table(listed)
    labels = {
        r.run.run_id: f"{r.run.name} · {r.run.submitted_at:%Y-%m-%d %H:%M:%S} · {r.run.run_id}"
        for r in listed
    }
    open_linked(labels)
    if st.session_state.get("follow_run") in labels:
        st.session_state["run_choice"] = st.session_state.pop("follow_run")
    if st.session_state.get("run_choice") not in labels:
        st.session_state.pop("run_choice", None)
    notice = st.container()  # above the picker, filled once a pick has had its say
    selected = st.selectbox("Run", list(labels), format_func=labels.__getitem__, key="run_choice")
    missing = ADDRESS.keep_choice("run", selected, labels)
    if missing:  # whatever the link said
        notice.error(f"run {escape_markdown(missing)} not found", icon=":material/link_off:")
    run_detail(wb, selected)


def run_detail(wb: Workbench, run_id: str) -> None:
    view = wb.runs.view(run_id)
    st.subheader(f"{escape_markdown(view.run.name)} · {view.run.state}")  # a spec names it
    # The run goes along in the link: Compare opens this run, not the newest.
    st.markdown(f":material/compare_arrows: [Compare its variants](compare?run={view.run_id})")
    run_status(view)
    limiters(view)
    batches(view)
    outcome(view)
    variants(wb, view)
    scores(wb, view.run_id)
    per_session(wb, view.run_id)
    field_failures(view)
    failures(view)
    actions(wb, view)
    items(wb, view)


def actions(wb: Workbench, view: RunView) -> None:
    left, middle, right, _ = st.columns([1, 1, 1, 3])
    if left.button("Cancel", disabled=not view.can_cancel, key=f"cancel_{view.run_id}"):
        ask(f"cancel::{view.run_id}")
    if middle.button(
        "Pause",
        disabled=not view.can_pause,
        key=f"pause_{view.run_id}",
        help="Stop sending now; requests in flight finish, the rest wait for Resume.",
    ):
        _act(wb.runs.pause, view.run_id)
    if right.button("Resume", disabled=not view.can_resume, key=f"resume_{view.run_id}"):
        _act(wb.runs.resume, view.run_id)
    c = view.counts
    question = (
        f"Cancel run {view.run_id}? Its {view.total - c.finished:,} items not yet closed "
        f"are not sent; the {c.finished:,} closed keep their results."
    )
    if confirmed(f"cancel::{view.run_id}", question, "Yes, cancel the run", "Keep it going"):
        _act(wb.runs.cancel, view.run_id)


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
        "Check",
        [ALL, *CheckStatus],
        key=f"items_check_{run_id}",
        help="What the output check found (outputs of a template with an output schema).",
    )
    search = cols[4].text_input(
        "Search",
        key=f"items_search_{run_id}",
        help="A key prefix, or text in the dataset row, the output or the error (any case).",
    )
    shown = ItemFilter(
        _picked(status), _picked(variant), _picked(kind), _picked(check), search.strip() or None
    )
    # Keys carry the filters: a new filter starts at page 1 with nothing selected.
    scope = f"{run_id}_{zlib.crc32(repr(shown).encode()):08x}"
    page_no = st.session_state.get(f"items_page_{scope}", 1)
    try:
        page = wb.runs.items(
            run_id,
            status=shown.status,
            variant=shown.variant,
            error_kind=shown.error_kind,
            check=shown.check,
            search=shown.search,
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
    # The files hold what the list shows, every page of it; the whole run is a choice.
    item_downloads(wb, run_id, shown, page.total, view.counts.open + view.counts.finished)
    if picked is not None:
        st.session_state[ITEM_CHOICE] = (run_id, picked)
    choice = st.session_state.get(ITEM_CHOICE)
    if choice and choice[0] == run_id:
        ADDRESS.show(run=run_id, item=choice[1])
        item_detail(wb, run_id, choice[1])


def _picked(choice: str) -> str | None:
    return None if choice == ALL else choice


def linked_run() -> str | None:
    """The run the address names: listed with the newest ones however old it is."""
    return ADDRESS.named().get("run")


def open_linked(labels: dict[str, str]) -> None:
    """`?run=RUN_ID&item=KEY`: open that run and item whenever the address changes (a
    link followed, the first load, Back)."""
    followed = ADDRESS.followed()
    run_id = followed.get("run")
    if run_id in labels:
        st.session_state["run_choice"] = run_id
        item = followed.get("item")
        if item:
            st.session_state[ITEM_CHOICE] = (run_id, item)
        elif (st.session_state.get(ITEM_CHOICE) or ("",))[0] == run_id:
            del st.session_state[ITEM_CHOICE]  # the address names the run, no item of it


require_shell("pages/runs.py")
st.title("Runs")
workbench = get_workbench()
start_form(workbench)
schedules(workbench)
live_panel(workbench)
