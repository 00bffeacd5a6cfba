"""Tabs of which only the open one runs.

`st.tabs` otherwise runs and sends every tab on every run: a page pays for the reads,
the figures and the browser code (Plotly, the data grid, the code highlighter) of tabs
nobody opened. Stateful tabs (`on_change="rerun"`) rerun the page when another tab is
picked, and the page draws that tab alone.

A closed tab's widgets are not drawn, and Streamlit drops the state of widgets a run
does not draw: what was typed or picked there would be lost on the way to another tab
and back. The keys a tab names in `keeps` are carried over while it is closed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator


def open_tab(
    labels: Sequence[str], *, key: str, keeps: Mapping[str, Sequence[str]] | None = None
) -> tuple[str, DeltaGenerator]:
    """Draw the tabs; return the open one's label and container, for the page to draw
    that tab's content (and nothing of the others). `st.session_state[key]` is the open
    label: a page sets it before this call to open another tab. `keeps` maps a label to
    the key prefixes of its widgets whose values outlive the tab being closed (never a
    button's: its value cannot be set)."""
    tabs = st.tabs(list(labels), key=key, on_change="rerun")
    index = next((i for i, tab in enumerate(tabs) if tab.open), 0)
    closed = tuple(
        prefix
        for label, prefixes in (keeps or {}).items()
        if label != labels[index]
        for prefix in prefixes
    )
    if closed:
        keep_widget_values(closed)
    return labels[index], tabs[index]


def keep_widget_values(prefixes: tuple[str, ...]) -> None:
    """Carry over the values of widgets this run does not draw (keys starting with
    `prefixes`): Streamlit keeps a value set through session state, not a widget's that
    was not drawn. Only for widgets this run does not draw: one drawn after its key was
    set in the same run logs a warning."""
    for name in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefixes)]:
        st.session_state[name] = st.session_state[name]
