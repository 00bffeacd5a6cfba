"""The Compare page's side-by-side outputs: each input of an all-mode run as every variant
answered it, a page at a time, with the words that differ from control's marked
(outputs escaped first: model text is never markup)."""

from __future__ import annotations

import html

import streamlit as st

from promptlab.facades.analysis import SideBySideRow
from promptlab.ui.widgets import escape_markdown
from promptlab.views.textdiff import word_diff_html
from promptlab.workbench import Workbench

NO_PAIRS = (
    "No input was answered by two variants: side-by-side outputs need an all-mode run "
    "(in a split run each input goes to one variant)."
)
#: Inputs shown per page of side-by-side outputs.
SIDE_BY_SIDE_PAGE = 10
_OUTPUT_BOX = (
    "white-space:pre-wrap;font-family:var(--font-mono, monospace);font-size:0.85rem;"
    "padding:0.5rem;border:1px solid rgba(128,128,128,0.3);border-radius:0.4rem"
)


def side_by_side(wb: Workbench, run_id: str, control: str, paired: bool) -> None:
    st.subheader("Side-by-side outputs")
    if not paired:
        # Not even a query: over a split run's million results it only finds nothing.
        st.info(NO_PAIRS, icon=":material/info:")
        return
    only_different = st.toggle("Only inputs whose outputs differ", key=f"sbs_diff_{run_id}")
    # A page number per filter: the filtered list has fewer pages.
    page_key = f"sbs_page_{run_id}_{only_different}"
    page_no = int(st.session_state.get(page_key, 1))
    page = wb.analysis.side_by_side(
        run_id, (page_no - 1) * SIDE_BY_SIDE_PAGE, SIDE_BY_SIDE_PAGE, only_different
    )
    if page.total == 0:
        st.info(
            NO_PAIRS
            if not only_different
            else "Every input got the same output from every variant.",
            icon=":material/info:",
        )
        return
    pages = max(1, -(-page.total // SIDE_BY_SIDE_PAGE))
    st.columns([1, 2])[0].number_input(
        f"Page (of {pages}; {page.total} inputs)",
        min_value=1,
        max_value=pages,
        step=1,
        key=page_key,
    )
    for row in page.rows:
        side_by_side_row(row, control)


def side_by_side_row(row: SideBySideRow, control: str) -> None:
    """One input: each variant's output; words differing from control's are marked."""
    st.markdown(f"**Row {row.row_index + 1}**" + (f", repeat {row.repeat}" if row.repeat else ""))
    base = next((o for o in row.outputs if o.variant == control), row.outputs[0])
    columns = st.columns(len(row.outputs))
    for column, output in zip(columns, row.outputs, strict=True):
        text = output.output_text
        if text is None:
            body = f"<em>{html.escape(output.status)}: {html.escape(output.error_kind or '')}</em>"
        elif output is base:
            body = html.escape(text)
            # With one other output, control shows what it has that the other lacks.
            if len(row.outputs) == 2:
                other = row.outputs[1] if row.outputs[0] is base else row.outputs[0]
                body = word_diff_html(text, other.output_text or "")[0]
        else:
            body = word_diff_html(base.output_text or "", text)[1]
        latency = f" · {output.latency_ms:.0f} ms" if output.latency_ms is not None else ""
        trace = f" · [trace](audit?trace={output.key})" if output.key else ""
        column.caption(f"{escape_markdown(output.variant)}{latency}{trace}")
        column.html(f'<div style="{_OUTPUT_BOX}">{body}</div>')
