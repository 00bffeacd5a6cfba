"""A page's address as a link to what it shows: `?run=...&item=...` opens the choice it
names whenever the address changes (a link followed, the first load, Back), and the
page writes its widgets' choices back, so a rerun keeps them and the address can be shared.
"""

from __future__ import annotations

from collections.abc import Collection

import streamlit as st


class Address:
    """The query parameters one page names its choices by (`params`), and what the page
    last read from or wrote to them (under `_address_{page}` in the session)."""

    def __init__(self, page: str, *params: str) -> None:
        self.page = page
        self.params = params

    @property
    def _seen(self) -> str:
        return f"_address_{self.page}"

    def named(self) -> dict[str, str]:
        """What the address names now, of this page's parameters."""
        return {p: str(st.query_params[p]) for p in self.params if st.query_params.get(p)}

    def changed(self) -> bool:
        """Whether the address changed since the page last read or wrote it."""
        return self.named() != st.session_state.get(self._seen)

    def followed(self) -> dict[str, str]:
        """What the address names when it changed since the page last read or wrote it,
        else {}. Once per change, not once per session: a session that showed another
        run still opens the one a later address names."""
        return self.follow() or {}

    def follow(self) -> dict[str, str] | None:
        """As `followed`, but None when the address did not change, and what it names
        ({} for none of the page's parameters) when it did: a page that keeps its whole
        state in the address starts every widget from it then (the first load, a
        reload, a link followed, Back), named or not."""
        if not self.changed():
            return None
        named = st.session_state[self._seen] = self.named()
        return named

    def show(self, **params: str | None) -> None:
        """Put what the page shows in the address (the parameters given, none other)."""
        wanted = {name: value for name, value in params.items() if value}
        if self.named() != wanted or len(st.query_params) != len(wanted):
            st.query_params.from_dict(wanted)
        # The page's own write is no link to follow on the next rerun.
        st.session_state[self._seen] = wanted

    def put(self, param: str, value: str | None) -> None:
        """Name `value` for one parameter (None: drop it), leaving the others as they are;
        the page's own write is no link to follow on the next rerun."""
        if st.query_params.get(param) != value:
            if value:
                st.query_params[param] = value
            elif param in st.query_params:
                del st.query_params[param]
        st.session_state[self._seen] = self.named()

    def open_choice(self, param: str, key: str, options: Collection[str]) -> None:
        """Before the widget keyed `key` is drawn: start it on what a changed address
        names, when that is among `options`."""
        name = self.followed().get(param)
        if name in options:
            st.session_state[key] = name

    def keep_choice(self, param: str, value: str, options: Collection[str]) -> str | None:
        """After the widget: the address follows its value, so a pick changes it and a
        rerun keeps it. An address naming what is not among `options` stays until the
        value changes (the page fell back, nobody picked): that name is returned, for the
        page to say in one line that it is not found; else None."""
        missing = self.missing(param, value, options)
        if missing is None and st.query_params.get(param) != value:
            self.show(**{param: value})
        return missing

    def missing(self, param: str, value: str, options: Collection[str]) -> str | None:
        """What the address names for `param` when it is not among `options` and the
        widget's `value` has not changed since (the page fell back, nobody picked), for
        the page to keep in the address and say in one line; else None."""
        last_key = f"{self._seen}_{param}_value"
        last = st.session_state.get(last_key)
        st.session_state[last_key] = value
        named = st.query_params.get(param)
        if named and named not in options and last in (None, value):
            return str(named)
        return None
