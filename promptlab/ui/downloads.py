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

from promptlab.export import FORMATS, mime_type
from promptlab.workbench import Comparison, PromptlabError, Workbench

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
    left, right = st.columns([1, 3], vertical_alignment="bottom")
    fmt = left.selectbox(
        "Format",
        list(FORMATS),
        format_func=FORMAT_LABELS.__getitem__,
        key=f"{key}::format",
        label_visibility="collapsed",
    )
    filters = {"run_id": run_id, "experiment": experiment, "prompt": prompt}
    right.download_button(
        label or f"Download {table}",
        data=_deferred(workbench, table, fmt, run_id, experiment, prompt),
        file_name=workbench.export_file_name(table, fmt, **filters),
        mime=mime_type(fmt),
        key=f"{key}::download",
        on_click="ignore",
        icon=":material/download:",
        help=f"The {table} table as {FORMAT_LABELS[fmt]}, written by DuckDB's COPY "
        "(the same file as `promptlab export`).",
    )


def _deferred(
    workbench: Workbench,
    table: str,
    fmt: str,
    run_id: str | None,
    experiment: str | None,
    prompt: str | None,
) -> Callable[[], bytes]:
    def export() -> bytes:
        try:
            return workbench.export_bytes(
                table, fmt, run_id=run_id, experiment=experiment, prompt=prompt
            )
        except PromptlabError as exc:
            # Runs off the page's thread: nothing can be shown, so the file says why.
            log.warning("download of %s failed: %s", table, exc)
            return f"export failed: {exc}\n".encode()

    return export


def comparison_download(workbench: Workbench, comparison: Comparison, *, key: str) -> None:
    """A format picker and a download button for a comparison exactly as shown."""
    left, right = st.columns([1, 3], vertical_alignment="bottom")
    fmt = left.selectbox(
        "Format",
        list(FORMATS),
        format_func=FORMAT_LABELS.__getitem__,
        key=f"{key}::format",
        label_visibility="collapsed",
    )
    right.download_button(
        "Download this comparison",
        data=lambda: workbench.comparison_bytes(comparison, fmt),
        file_name=f"comparison-{comparison.run_id or comparison.mode}.{fmt}",
        mime=mime_type(fmt),
        key=f"{key}::download",
        on_click="ignore",
        icon=":material/download:",
        help=f"Every row of the table above as {FORMAT_LABELS[fmt]}, written by DuckDB's COPY.",
    )
