"""A download button for any exportable table: pick a format, get the file.

    download_buttons(wb, "results", key="run_results", run_id=run_id)

renders a format picker and a download button beside it. The file is made only when
the button is clicked (Streamlit calls `data` then, on its own thread), by the same
DuckDB COPY as `promptlab export`, so it holds the rows the CLI would write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from promptlab.analysis.compare import Comparison
from promptlab.data.export import FORMATS, mime_type
from promptlab.errors import PromptlabError
from promptlab.workbench import Workbench

log = logging.getLogger(__name__)

#: Format labels in the picker.
FORMAT_LABELS = {"csv": "CSV", "parquet": "Parquet", "jsonl": "JSON Lines"}


def download_buttons(
    workbench: Workbench,
    table: str,
    *,
    key: str,
    label: str | None = None,
    run_id: str | None = None,
    experiment: str | None = None,
    prompt: str | None = None,
) -> None:
    """A format picker and a download button for `table` (items, results, attempts,
    metrics, comparisons, feedback) filtered like `promptlab export`.

    `key` must be unique on the page (widget keys are derived from it); `label`
    defaults to "Download TABLE".
    """
    fmt, column = _format_picker(key)
    filters = {"run_id": run_id, "experiment": experiment, "prompt": prompt}
    _button(
        column, fmt, key, label or f"Download {table}",
        data=_deferred(workbench, table, fmt, run_id, experiment, prompt),
        file_name=workbench.exports.file_name(table, fmt, **filters),
        help=f"The {table} table as {FORMAT_LABELS[fmt]}, written by DuckDB's COPY "
        "(the same file as `promptlab export`).",
    )  # fmt: skip


def comparison_download(workbench: Workbench, comparison: Comparison, *, key: str) -> None:
    """A format picker and a download button for a comparison exactly as shown."""
    fmt, column = _format_picker(key)
    _button(
        column, fmt, key, "Download this comparison",
        data=_or_reason("comparison", lambda: workbench.exports.comparison_bytes(comparison, fmt)),
        file_name=f"comparison-{comparison.run_id or comparison.mode}.{fmt}",
        help=f"Every row of the table above as {FORMAT_LABELS[fmt]}, written by DuckDB's COPY.",
    )  # fmt: skip


def _format_picker(key: str) -> tuple[str, DeltaGenerator]:
    """The chosen format, and the column beside the picker for the button."""
    left, right = st.columns([1, 3], vertical_alignment="bottom")
    fmt = left.selectbox(
        "Format",
        list(FORMATS),
        format_func=FORMAT_LABELS.__getitem__,
        key=f"{key}::format",
        label_visibility="collapsed",
    )
    return str(fmt), right


def _button(
    column: DeltaGenerator,
    fmt: str,
    key: str,
    label: str,
    *,
    data: Callable[[], bytes],
    file_name: str,
    help: str,
) -> None:
    column.download_button(
        label,
        data=data,
        file_name=file_name,
        mime=mime_type(fmt),
        key=f"{key}::download",
        on_click="ignore",  # the file is made when clicked; no rerun of the page
        icon=":material/download:",
        help=help,
    )


def _deferred(
    workbench: Workbench,
    table: str,
    fmt: str,
    run_id: str | None,
    experiment: str | None,
    prompt: str | None,
) -> Callable[[], bytes]:
    return _or_reason(
        table,
        lambda: workbench.exports.table_bytes(
            table, fmt, run_id=run_id, experiment=experiment, prompt=prompt
        ),
    )


def _or_reason(what: str, make: Callable[[], bytes]) -> Callable[[], bytes]:
    """`make`, or a file saying why it failed: Streamlit calls it off the page's
    thread when the button is clicked, so nothing could be shown on the page."""

    def export() -> bytes:
        try:
            return make()
        except PromptlabError as exc:
            log.warning("download of %s failed: %s", what, exc)
            return f"export failed: {exc}\n".encode()

    return export
