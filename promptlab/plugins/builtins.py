"""promptlab's own scorers, registered through the hook a plugin's go through."""

from __future__ import annotations

from collections.abc import Callable

from promptlab.evaluation.scorers import ScorerKind, built_in_kinds
from promptlab.plugins.hookspecs import hookimpl


@hookimpl
def register_scorers(register: Callable[[ScorerKind], None]) -> None:
    for kind in built_in_kinds():
        register(kind)
