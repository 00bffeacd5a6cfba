"""Keep every page inside the app shell (app.py's st.navigation), even on a deep link.

Streamlit treats a top-level `pages/` folder as a v1 multipage app until the entry
script has called `st.navigation` once in the process. A first request straight to
`/runs` would then run pages/runs.py alone: no page config, no navigation. Pages call
`require_shell()`; it sends such a request through app.py, which goes on to the page
that was asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st
from streamlit.errors import StreamlitAPIException

#: The app's favicon: a flask drawn in SVG (Streamlit sends an SVG string as a data:
#: URL, so no browser fetches anything for it, and it needs no emoji font).
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<path d="M12 3h8v2h-1v8l8 13a3 3 0 0 1-2.6 4.5H7.6A3 3 0 0 1 5 26l8-13V5h-1z" '
    'fill="#5b21b6"/><path d="M9.5 21h13l2.6 4.3a1 1 0 0 1-.9 1.5H7.8a1 1 0 0 1-.9-1.5z" '
    'fill="#c4b5fd"/></svg>'
)

_SHELL_FLAG = "_promptlab_shell_run"
_DEEP_LINK = "_promptlab_deep_link"


def mark_shell_run() -> None:
    """Called by app.py on every run, before the page runs."""
    st.session_state[_SHELL_FLAG] = True


def require_shell(page_path: str) -> None:
    """Restart through app.py when this page was started without it."""
    if st.session_state.get(_SHELL_FLAG):
        return
    # The query (`?run=...&item=...`) goes along: switch_page drops it unless given.
    query = st.query_params.to_dict()
    st.session_state[_DEEP_LINK] = (page_path, query)
    try:
        st.switch_page("app.py", query_params=query)
    except StreamlitAPIException:
        # No app.py page to go through: the page runs alone (an AppTest of one page).
        st.session_state.pop(_DEEP_LINK, None)


def follow_deep_link() -> None:
    """In app.py, after st.navigation: go on to the page a deep link asked for."""
    target = st.session_state.pop(_DEEP_LINK, None)
    if target:
        page_path, query = target
        st.switch_page(page_path, query_params=query)


def home_page(page: Any, *, otherwise: Any, when: Callable[[], bool]) -> Any:
    """The page at `/`, hidden from the menu: it goes on to `page` when `when()` says
    so (Compare once results exist), else to `otherwise` (Prompts).

    Streamlit serves the default page at `/` only: had a real page been the default, it
    would have lost its own address (`/prompts` said "page not found"). This one has no
    content of its own, so every real page keeps its path.
    """

    def home() -> None:
        st.switch_page(page if when() else otherwise)

    return st.Page(home, title="promptlab", url_path="home", default=True, visibility="hidden")
