"""Ask before a change: the label mover's rule for every change a click makes.

A first click only asks: a question naming what will change, and two buttons. The change
is made on "yes"; "no" (or any other rerun that does not answer) changes nothing. The
question is kept in session state under the change's key until it is answered, so a
rerun between the two clicks does not lose it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from promptlab.ui.widgets import escape_markdown


def ask(key: str, change: Any = True) -> None:
    """Remember that `change` waits for a confirmation (the next run shows the question)."""
    st.session_state[f"confirm::{key}"] = change


def pending(key: str) -> Any:
    """The change waiting under `key`, or None."""
    return st.session_state.get(f"confirm::{key}")


def confirmed(key: str, question: str, yes: str, no: str) -> bool:
    """Show the question for the change waiting under `key`, if one is; True once, on
    the click of `yes` (the change is then taken off); `no` takes it off and reruns."""
    if pending(key) is None:
        return False
    st.warning(escape_markdown(question), icon=":material/warning:")
    left, right, _ = st.columns([2, 2, 3])
    if left.button(yes, type="primary", key=f"confirm::{key}::yes"):
        st.session_state.pop(f"confirm::{key}", None)
        return True
    if right.button(no, key=f"confirm::{key}::no"):
        st.session_state.pop(f"confirm::{key}", None)
        st.rerun()
    return False
