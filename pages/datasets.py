"""Datasets: import a file, see its columns and first rows, set its unit column, and
check its rows against a prompt version."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from promptlab.errors import PromptlabError, StoreError
from promptlab.facades.analysis import LOG_FIELDS
from promptlab.records import Conversation, DatasetInfo, RowCheck
from promptlab.records.datasets import DEFAULT_CONVERSATION
from promptlab.ui.confirm import ask, confirmed, pending
from promptlab.ui.resources import get_workbench
from promptlab.ui.shell import require_shell
from promptlab.ui.uploads import dataset_name_for, saved_upload
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench

PREVIEW_ROWS = 20
NO_UNIT = "(none)"
#: The file types the uploads take: the formats DuckDB reads for us.
UPLOAD_TYPES = ["csv", "jsonl", "ndjson", "parquet"]


def import_form(wb: Workbench) -> None:
    upload = st.file_uploader(
        "File",
        type=UPLOAD_TYPES,
        key="dataset_upload",
        help="CSV with a header row, JSON Lines (one object a line), or Parquet.",
    )
    name = st.text_input(
        "Name",
        key="dataset_name",
        placeholder=dataset_name_for(upload.name) if upload else "",
        help="Lowercase letters, digits, - _ . (default: from the file name)",
    )
    unit = st.text_input(
        "Unit column (optional)",
        key="dataset_unit",
        help="The column naming the unit an experiment assigns: a user, a customer.",
    )
    replace = st.checkbox("Replace a dataset of the same name", key="dataset_replace")
    log = conversation_columns()
    clicked = st.button("Import", type="primary", key="dataset_import", disabled=upload is None)
    chosen = (name.strip() or dataset_name_for(upload.name)) if upload is not None else ""
    existing = {d.name: d for d in wb.datasets.list()} if replace and clicked else {}
    if clicked and chosen in existing:
        ask("dataset_replace", chosen)  # the rows it replaces are named before they go
        clicked = False
    waiting = pending("dataset_replace")
    if waiting and confirmed(
        "dataset_replace",
        f"Replace dataset {waiting} ({_size(wb, waiting)}) with the rows of "
        f"{upload.name if upload else 'the file'}? Runs keep their own copy of the rows "
        "they used.",
        "Yes, replace it",
        "Keep it",
    ):
        clicked, chosen = True, waiting
    if clicked and upload is not None:
        try:
            with saved_upload(upload, upload.name, upload.size) as path:
                info = wb.datasets.import_file(
                    path,
                    chosen,
                    unit_column=unit.strip() or None,
                    replace=replace,
                    conversation=log,
                )
        except PromptlabError as exc:
            show_error(exc)
        else:
            st.session_state["dataset_choice"] = info.name  # show what was just imported
            st.success(
                f"Imported {escape_markdown(info.name)}: {info.row_count:,} rows, "
                f"{len(info.columns)} columns",
                icon=":material/check_circle:",
            )


def _size(wb: Workbench, name: str) -> str:
    try:
        info = wb.datasets.get(name)
    except PromptlabError:
        return "gone meanwhile"
    return f"{info.row_count:,} rows, {len(info.columns)} columns"


def conversation_columns() -> Conversation | None:
    """The log's four columns, when the file is a conversation log."""
    if not st.checkbox("A conversation log (one message a row, in sessions)", key="dataset_conv"):
        return None
    cols = st.columns(4)
    given = {
        purpose: cols[i]
        .text_input(f"{purpose.capitalize()} column", value=default, key=f"dataset_conv_{purpose}")
        .strip()
        or default
        for i, (purpose, default) in enumerate(DEFAULT_CONVERSATION.columns().items())
    }
    return Conversation(**given)


def conversation_view(wb: Workbench, info: DatasetInfo) -> None:
    """A session of the log as a chat."""
    st.subheader("Sessions")
    sessions = wb.datasets.sessions(info.name)
    st.dataframe(
        pd.DataFrame(
            {
                "session": s.session,
                "messages": s.messages,
                "user turns": s.user_turns,
                "first": s.first,
                "last": s.last,
            }
            for s in sessions
        ),
        hide_index=True,
        height=min(400, 35 * (len(sessions) + 1) + 3),
    )
    chosen = st.selectbox("Session", [s.session for s in sessions], key="dataset_session")
    for turn in wb.datasets.session(info.name, chosen) if chosen is not None else []:
        avatar = ":material/settings:" if turn.role == "system" else None
        with st.chat_message(turn.role, avatar=avatar):
            st.caption(f"{turn.role} · {escape_markdown(turn.order)}")
            st.markdown(escape_markdown(turn.content))


FEEDBACK_HELP = (
    "Feedback events: a row per event with `result_id` (a result's key) or `version` + "
    "`unit_id`, `kind` (impression, click, thumbs_up, thumbs_down, completed), optional "
    "`value` and `event_time`."
)
LOGS_HELP = (
    "Production request logs: a row per request with `version` (name@version, "
    "name@label or a version id), `unit_id`, `latency_ms`, `clicked`, `completed`, "
    "`event_time`. Other column names can be mapped below."
)


def feedback_form(wb: Workbench) -> None:
    """Import feedback events or a production log; the whole file or nothing."""
    kind = st.radio(
        "What the file holds",
        ["Feedback events", "Production logs"],
        horizontal=True,
        key="fb_kind",
    )
    logs = kind == "Production logs"
    st.caption(LOGS_HELP if logs else FEEDBACK_HELP)
    upload = st.file_uploader("File", type=UPLOAD_TYPES, key="fb_upload")
    columns: dict[str, str] = {}
    if logs:
        cols = st.columns(len(LOG_FIELDS))
        for col, field in zip(cols, LOG_FIELDS, strict=True):
            given = col.text_input(field, key=f"fb_col_{field}", placeholder=field)
            if given.strip():
                columns[field] = given.strip()
    if st.button("Import", type="primary", key="fb_import", disabled=upload is None):
        assert upload is not None
        try:
            with saved_upload(upload, upload.name, upload.size) as path:
                n = (
                    wb.analysis.import_logs(path, columns)
                    if logs
                    else wb.analysis.import_feedback(path)
                )
        except PromptlabError as exc:
            show_error(exc)
        else:
            what = ("log row" if logs else "feedback event") + ("" if n == 1 else "s")
            st.success(
                f"Imported {n:,} {what} from {escape_markdown(upload.name)}",
                icon=":material/check_circle:",
            )


def datasets_table(infos: list[DatasetInfo]) -> None:
    st.dataframe(
        pd.DataFrame(
            {
                "dataset": i.name,
                "rows": i.row_count,
                "columns": ", ".join(i.column_names),
                "unit column": i.unit_column or "",
                "source": i.source,
                "imported": i.imported_at,
                "by": i.author,
            }
            for i in infos
        ),
        hide_index=True,
        width="stretch",
    )


def detail(wb: Workbench, info: DatasetInfo) -> None:
    st.caption(
        escape_markdown(  # the file's name, as uploaded
            f"{info.row_count:,} rows from {info.source} ({info.format}), imported "
            f"{info.imported_at:%Y-%m-%d %H:%M} by {info.author}"
        )
    )
    columns, rows = st.columns([1, 3])
    with columns:
        st.dataframe(
            pd.DataFrame({"column": c, "type": t} for c, t in info.columns),
            hide_index=True,
            width="stretch",
        )
    with rows:
        preview = wb.datasets.preview(info.name, PREVIEW_ROWS)
        table = pd.DataFrame([{k: _cell(v) for k, v in row.items()} for row in preview])
        table.index = range(1, len(table) + 1)  # row numbers as the store counts them
        st.dataframe(table, width="stretch")
    if info.conversation is not None:
        conversation_view(wb, info)
    unit_form(wb, info)
    check_form(wb, info)
    with st.expander("Delete this dataset", icon=":material/delete:"):
        st.caption("Runs keep their own copy of the rows they used.")
        key = f"dataset_delete::{info.name}"
        if st.button("Delete", key=f"dataset_delete_{info.name}"):
            ask(key)
        question = (
            f"Delete dataset {info.name} ({info.row_count:,} rows, {len(info.columns)} "
            "columns)? Its rows go; runs keep their own copy of the rows they used."
        )
        if confirmed(key, question, "Yes, delete it", "Keep it"):
            try:
                wb.datasets.delete(info.name)
            except PromptlabError as exc:
                show_error(exc)
            else:
                st.session_state.pop("dataset_choice", None)
                st.rerun()


def unit_form(wb: Workbench, info: DatasetInfo) -> None:
    options = [NO_UNIT, *info.column_names]
    current = options.index(info.unit_column) if info.unit_column in options else 0
    left, right = st.columns([3, 1], vertical_alignment="bottom")
    chosen = left.selectbox(
        "Unit column",
        options,
        index=current,
        key=f"unit_{info.name}",
        help="The column an experiment assigns variants by (all rows of a unit get the same).",
    )
    if right.button("Save unit column", key=f"unit_save_{info.name}"):
        try:
            wb.datasets.set_unit_column(info.name, None if chosen == NO_UNIT else chosen)
        except PromptlabError as exc:
            show_error(exc)
        else:
            # A column is named by the file's header: any text.
            st.success(f"Unit column: {escape_markdown(chosen)}", icon=":material/check_circle:")


def check_form(wb: Workbench, info: DatasetInfo) -> None:
    st.subheader("Check rows against a prompt")
    prompts = wb.prompts.list()
    if not prompts:
        st.info("No prompts yet.", icon=":material/info:")
        return
    left, right = st.columns(2)
    prompt = left.selectbox("Prompt", [p.name for p in prompts], key="check_prompt")
    summary = next(p for p in prompts if p.name == prompt)
    refs = [*summary.labels, *(v.semver for v in wb.prompts.versions(prompt))]
    ref = right.selectbox("Version or label", refs, key="check_ref")
    if st.button("Check rows", key="check_rows"):
        try:
            result = wb.datasets.check_rows(info.name, f"{prompt}@{ref}")
        except PromptlabError as exc:
            show_error(exc)
        else:
            show_check(result)


def show_check(result: RowCheck) -> None:
    cols = st.columns(3)
    cols[0].metric("Rows", f"{result.total:,}")
    cols[1].metric("Valid", f"{result.valid:,}")
    cols[2].metric("Bad", f"{result.bad:,}")
    if not result.problems:
        st.success("Every row fits the prompt's variables.", icon=":material/check_circle:")
        return
    shown = len({p.row_number for p in result.problems})
    if result.bad > shown:
        st.caption(f"The first problems, from {shown:,} of the {result.bad:,} bad rows:")
    st.dataframe(
        pd.DataFrame(
            {"row": p.row_number, "column": p.column, "problem": p.problem} for p in result.problems
        ),
        hide_index=True,
        width="stretch",
    )


def _cell(value: Any) -> Any:
    """Nested values as JSON text: a table cell shows one value."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value


require_shell("pages/datasets.py")
st.title("Datasets")
try:
    wb = get_workbench()
except StoreError as exc:  # e.g. PROMPTLAB_DB under a regular file, or not a database
    show_error(exc)
    st.stop()
infos = wb.datasets.list()
with st.expander("Import a file", expanded=not infos, icon=":material/upload:"):
    import_form(wb)
with st.expander("Import feedback or production logs", icon=":material/thumbs_up_down:"):
    feedback_form(wb)
infos = wb.datasets.list()  # with the one just imported
if not infos:
    st.info("No datasets yet.", icon=":material/info:")
    st.stop()
datasets_table(infos)
names = [i.name for i in infos]
if st.session_state.get("dataset_choice") not in names:
    st.session_state.pop("dataset_choice", None)
selected = st.selectbox("Dataset", names, key="dataset_choice")
detail(wb, next(i for i in infos if i.name == selected))
