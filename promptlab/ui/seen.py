"""What the person saw: the version of a thing as the page last showed it.

A click reruns the whole page, which reads the database afresh before the button's
branch runs; a change checked against that fresh read would pass even when someone
else changed the thing between showing and clicking. So a page remembers the version
each run shows, and a change names the one shown before the click (the library refuses
it when that is stale: StaleChangeError).
"""

from __future__ import annotations

from typing import TypeVar

import streamlit as st

T = TypeVar("T")

_PREFIX = "_seen::"


def seen_before(key: str, shown_now: T) -> T:
    """The version the previous run showed under `key` (`shown_now` when it is shown for
    the first time), remembering `shown_now` for the next click."""
    state_key = _PREFIX + key
    before: T = st.session_state.get(state_key, shown_now)
    st.session_state[state_key] = shown_now
    return before
