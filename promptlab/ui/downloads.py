"""Download buttons for any exportable table: pick a format, make the file, save it.

    download_buttons(wb, "results", key="run_results", run_id=run_id)

renders a format picker and a button beside it, and beside the button a caption saying
what the file holds (`caption=`: "240 items: variant v20" for a filtered items list,
whose filters `items=` passes down to the export). Pressing it makes the file (by the same
DuckDB COPY as `promptlab export`, so it holds the rows the CLI would write) while the
page runs, and puts a "Save FILE" button in its place; a file that cannot be made says
why on the page, until the next try. Why not Streamlit's deferred download (a `data`
callable run on the click): it gets a new id at each redraw of the page and drops the
old one, so on the Runs page, which redraws every second, a click could hold an id
already gone and get no file at all (`MediaFileStorageError: Deferred file ... not
found`); and its callable runs off the page, where no error can be shown. A file made
here is served at an address derived from its content, the same at every redraw.

One made file is kept per session (the last one made): a large export is not held
once another is asked for.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from promptlab.analysis.compare import Comparison
from promptlab.data.export import NEUTRALISED_HELP, ExportFilters, exporters, mime_type
from promptlab.errors import PromptlabError
from promptlab.records import ItemFilter
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench

log = logging.getLogger(__name__)

#: Format labels in the picker.
#: Session-state slots: the file made last, and the last file that could not be made.
MADE = "_download_made"
FAILED = "_download_failed"


@dataclass(frozen=True)
class MadeFile:
    """A file made for one download button, for one choice of what it holds."""

    key: str
    #: What the file holds (table, format, filters): another choice makes another file.
    what: Hashable
    data: bytes
    file_name: str
    made_at: datetime


@dataclass(frozen=True)
class FailedFile:
    key: str
    what: Hashable
    message: str


def download_buttons(
    workbench: Workbench,
    table: str,
    *,
    key: str,
    label: str | None = None,
    run_id: str | None = None,
    experiment: str | None = None,
    prompt: str | None = None,
    items: ItemFilter | None = None,
    caption: str | None = None,
) -> None:
    """A format picker and a download button for `table` (items, results, attempts,
    metrics, comparisons, feedback) filtered like `promptlab export`; `items` keeps the
    run's items a filtered list shows (and their results and attempts).

    `key` must be unique on the page (widget keys are derived from it); `label`
    defaults to "Download TABLE"; `caption`, beside the button, says what the file holds.
    """
    fmt, column = _format_picker(key)
    filters = {"run_id": run_id, "experiment": experiment, "prompt": prompt}
    kept = items or ItemFilter()
    if caption is None:
        scope = ExportFilters(run_id, experiment, prompt, kept).describe()
        caption = f"{table}: {'every row' if scope == 'no filter' else scope}"
    file_download(
        key,
        label or f"Download {table}",
        lambda: workbench.exports.table_bytes(table, fmt, **filters, items=kept),
        what=(table, fmt, tuple(filters.items()), kept),
        file_name=workbench.exports.file_name(table, fmt, **filters, items=kept),
        mime=mime_type(fmt),
        help=f"The {table} table as {_label(fmt)}, written as `promptlab export` writes it"
        f".{_csv_note(fmt)}",
        column=column,
        caption=caption,
    )


def comparison_download(workbench: Workbench, comparison: Comparison, *, key: str) -> None:
    """A format picker and a download button for a comparison exactly as shown."""
    fmt, column = _format_picker(key)
    file_name = f"comparison-{comparison.run_id or comparison.mode}.{fmt}"
    file_download(
        key,
        "Download this comparison",
        lambda: workbench.exports.comparison_bytes(comparison, fmt),
        # The comparison as shown: another pair of versions or another control is
        # another file, even under the same name.
        what=(file_name, hashlib.sha256(repr(comparison).encode()).hexdigest()),
        file_name=file_name,
        mime=mime_type(fmt),
        help=f"Every row of the table above as {_label(fmt)}, written as `promptlab export` "
        f"writes it.{_csv_note(fmt)}",
        column=column,
        caption=f"{len(comparison.rows)} rows: the table above, against {comparison.control}",
    )


def file_download(
    key: str,
    label: str,
    make: Callable[[], bytes],
    *,
    what: Hashable,
    file_name: str,
    mime: str,
    help: str,
    column: DeltaGenerator | None = None,
    caption: str | None = None,
) -> None:
    """A button that makes the file (`make`, while the page runs) and then a button that
    saves it; a file that cannot be made shows why. `what` names what the file holds:
    when it changes (another format, other filters), the file is made again; `caption`
    says it beside the button ("240 items: variant v20")."""
    where = column if column is not None else st
    if caption:
        where = where.container(horizontal=True, vertical_alignment="center", gap="small")
    # One slot: the make button, replaced by the save button once the file is made.
    slot = where.empty()
    if caption:
        where.caption(escape_markdown(caption))
    made = st.session_state.get(MADE)
    if isinstance(made, MadeFile) and (made.key, made.what) != (key, what):
        made = None
    if made is None and slot.button(
        label,
        key=f"{key}::make",
        icon=":material/download:",
        help=f"{help} The file is made first, then a button saves it.",
    ):
        made = _make(key, what, make, file_name)
    if made is not None:
        slot.download_button(
            f"Save file ({_size(len(made.data))})",
            data=made.data,
            file_name=file_name,
            mime=mime,
            key=f"{key}::download",
            on_click="ignore",  # saving changes nothing on the page: no rerun
            icon=":material/save:",
            help=escape_markdown(
                f"{file_name}, made at {made.made_at:%H:%M:%S}; change the format to make "
                "another, or reload the page to make it again with what changed since."
            ),
        )
    failed = st.session_state.get(FAILED)
    if isinstance(failed, FailedFile) and (failed.key, failed.what) == (key, what):
        show_error(failed.message)


def _make(key: str, what: Hashable, make: Callable[[], bytes], file_name: str) -> MadeFile | None:
    """The file, kept as the session's one made file; None (and the reason kept to show)
    when it could not be made."""
    st.session_state.pop(MADE, None)  # a large file is let go before the next is made
    st.session_state.pop(FAILED, None)
    try:
        with st.spinner(f"Making {file_name}…"):
            data = make()
    # Whatever stops the file (a full disk, a refused filter, a bug) is shown, not lost.
    except Exception as exc:  # noqa: BLE001 - the reason goes on the page, the trace to the log
        log.warning("download %s: %s could not be made", key, file_name, exc_info=True)
        reason = str(exc) if isinstance(exc, PromptlabError) else f"{type(exc).__name__}: {exc}"
        st.session_state[FAILED] = FailedFile(
            key,
            what,
            f"Could not make {file_name}: {reason}. Nothing was downloaded; "
            "press the button again to retry.",
        )
        return None
    made = MadeFile(key, what, data, file_name, datetime.now().astimezone())
    st.session_state[MADE] = made
    return made


def _csv_note(fmt: str) -> str:
    """What a CSV download does to formula-like cells, and where exact values are."""
    if fmt != "csv":
        return ""
    return f" {NEUTRALISED_HELP} JSON Lines and Parquet keep every value exactly."


def _size(count: int) -> str:
    if count < 1024:
        return f"{count:,} bytes"
    if count < 1024**2:
        return f"{count / 1024:.1f} KB"
    return f"{count / 1024**2:,.1f} MB"


def _format_picker(key: str) -> tuple[str, DeltaGenerator]:
    """The chosen format, and the column beside the picker for the button."""
    left, right = st.columns([1, 3], vertical_alignment="bottom")
    fmt = left.selectbox(
        "Format",
        list(exporters()),
        format_func=_label,
        key=f"{key}::format",
        label_visibility="collapsed",
    )
    return str(fmt), right


def _label(fmt: str) -> str:
    """A format as the picker shows it: its label, and whose it is when a plugin's."""
    exporter = exporters()[fmt]
    return (
        exporter.label
        if exporter.plugin == "promptlab"
        else f"{exporter.label} ({exporter.plugin})"
    )
