"""promptlab's own providers, scorers and export formats, registered through the hooks a
plugin's go through."""

from __future__ import annotations

from collections.abc import Callable

from promptlab.data.export import Exporter, built_in_exporters
from promptlab.evaluation.scorers import ScorerKind, built_in_kinds
from promptlab.plugins.hookspecs import hookimpl
from promptlab.providers import ProviderKind, built_in_providers


@hookimpl
def register_scorers(register: Callable[[ScorerKind], None]) -> None:
    for kind in built_in_kinds():
        register(kind)


@hookimpl
def register_exporters(register: Callable[[Exporter], None]) -> None:
    for exporter in built_in_exporters():
        register(exporter)


@hookimpl
def register_providers(register: Callable[[ProviderKind], None]) -> None:
    for kind in built_in_providers():
        register(kind)
