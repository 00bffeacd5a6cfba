"""Messages that outlive the rerun following a save: a page stores one where the user
acted, and shows it there on the next run."""

from __future__ import annotations

import streamlit as st

from promptlab.ui.widgets import escape_markdown


def flash(where: str, kind: str, text: str) -> None:
    """Keep a message across the rerun that follows a save, to show where the user acted."""
    st.session_state[f"flash::{where}"] = (kind, text)


def show_flash(where: str) -> None:
    """The message kept for `where`, once (success or info; nothing when none is kept)."""
    kind, text = st.session_state.pop(f"flash::{where}", (None, None))
    if kind == "success":
        st.success(escape_markdown(text), icon=":material/check_circle:")
    elif kind == "info":
        st.info(escape_markdown(text), icon=":material/info:")
