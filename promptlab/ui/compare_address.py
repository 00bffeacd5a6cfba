"""The Compare page's whole state in its address: a reload, a bookmark or a shared link
shows the same view.

`/compare?mode=versions&a=triage@1.0.0&b=triage@1.1.0&data=collecting&planned=400`
names the source (`mode`: none for a run's variants, `versions`, `logs`); a run's
`run`, `control` and `variant`; two versions' `a`, `b`, `since`, `data` (`collecting`
or `finished`), `planned` (units per arm, while collecting) and `cuped`; the open
`tab`; the change to detect (`mde`) and the Repeats spread shown (`metric`). A value at
its default is left out, but a run's `run`.

Each widget the address names starts from it whenever the address changes (the first
load of a session, a reload, a link followed, Back) and keeps the session's value
otherwise; the page writes every value back once drawn (`CompareState.write`). Such a
widget takes no default of its own: its default goes into the session first, since
Streamlit logs a stack trace for a widget given both a default and a value through the
session ("created with a default value but also had its value set via the Session
State API").
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import streamlit as st

from promptlab.ui.address import Address

#: The page's address, in the order a link shows its parameters.
ADDRESS = Address(
    "compare",
    "mode",
    "run",
    "control",
    "variant",
    "a",
    "b",
    "since",
    "data",
    "planned",
    "cuped",
    "tab",
    "mde",
    "metric",
)


class CompareState:
    """One run of the page: what a changed address names (`link`; None when the address
    did not change since the page last read or wrote it) and what the page shows."""

    def __init__(self) -> None:
        self.link = ADDRESS.follow()
        self.shown: dict[str, str | None] = {}

    def start(
        self,
        key: str,
        param: str,
        default: Any,
        *,
        options: Collection[Any] | None = None,
        parse: Callable[[str], Any] = str,
    ) -> None:
        """Before the widget keyed `key` is drawn (with no default of its own): its value
        is what a changed address names for `param` (parsed, and among `options` when
        given), else `default`; with the address unchanged, the session's value stays
        when it is a valid one."""
        if self.link is not None:
            st.session_state[key] = self.named(param, default, options, parse)
        elif key not in st.session_state or (
            options is not None and st.session_state[key] not in options
        ):
            st.session_state[key] = default

    def named(
        self,
        param: str,
        default: Any,
        options: Collection[Any] | None = None,
        parse: Callable[[str], Any] = str,
    ) -> Any:
        """What the followed address names for `param`, parsed; `default` when it names
        nothing, nothing `parse` reads (ValueError or None), or nothing in `options`."""
        text = (self.link or {}).get(param)
        if not text:
            return default
        try:
            value = parse(text)
        except ValueError:
            return default
        if value is None or (options is not None and value not in options):
            return default
        return value

    def show(self, param: str, value: Any, default: Any = None) -> None:
        """What the address names for `param` once its widget is drawn: nothing for
        `default` (or None)."""
        self.shown[param] = None if value is None or value == default else as_text(value)

    def write(self) -> None:
        """The address names what the page showed, and nothing else."""
        ADDRESS.show(**{param: self.shown.get(param) for param in ADDRESS.params})


def as_text(value: Any) -> str:
    """A widget's value as the address writes it: 1 for a ticked box, 400 for 400.0."""
    if isinstance(value, bool):
        return "1" if value else ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def flag(text: str) -> bool | None:
    """A ticked box in the address (`1`, `true`); None for anything else."""
    return True if text.lower() in ("1", "true", "yes") else None


def whole(low: int) -> Callable[[str], int]:
    """A whole number of at least `low` from the address (ValueError otherwise)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(text)
        return value

    return parse


def between(low: float, high: float) -> Callable[[str], float]:
    """A number in [low, high] from the address (ValueError otherwise)."""

    def parse(text: str) -> float:
        value = float(text)
        if not low <= value <= high:
            raise ValueError(text)
        return value

    return parse
