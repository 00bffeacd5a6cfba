"""What a plugin may add, as pluggy hook specifications (the way llm and pytest do).

A plugin is a module (or object) with functions marked `@hookimpl` named like the
specifications below, registered through the `promptlab` entry-point group of its
package:

    [project.entry-points.promptlab]
    sample = "promptlab_plugin_sample"

promptlab's own providers, scorers and export formats come through the same hooks
(promptlab/plugins/builtins.py). Where each hook is called: `register_providers` when an
endpoint's kind is checked (promptlab/providers/config.py) and its adapter built
(promptlab/providers/__init__.py build_provider), `register_scorers` when a
spec's `scorers:` are checked (promptlab/evaluation/scorers.py), `register_output_checks`
when its `output_checks:` are, and on each answer (promptlab/checks/plugged.py),
`register_exporters`
when an export's format is checked (promptlab/data/export.py), `register_routes` when
the API is made (promptlab/server/plugin_routes.py), `register_commands` when the
`promptlab` command looks up a name it does not hold (promptlab/cli/__init__.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from promptlab.checks.plugged import TextCheck
    from promptlab.data.export import Exporter
    from promptlab.evaluation.scorers import ScorerKind
    from promptlab.providers import ProviderKind
    from promptlab.server.plugin_routes import PluginRoute

#: The project name hooks are marked with.
PROJECT = "promptlab"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Specs:
    """The hooks; each is called once per plugin, with a function to register with."""

    @hookspec
    def register_providers(self, register: Callable[[ProviderKind], None]) -> None:
        """Register endpoint kinds (`register(ProviderKind(...))`): a providers file's
        endpoint (or a spec's keyless loopback one) names one by `kind:`, and its
        adapter sends that endpoint's requests."""

    @hookspec
    def register_scorers(self, register: Callable[[ScorerKind], None]) -> None:
        """Register scorer kinds (`register(ScorerKind(...))`): a spec names one by its
        `kind:`, with its options."""

    @hookspec
    def register_output_checks(self, register: Callable[[TextCheck], None]) -> None:
        """Register output checks (`register(TextCheck(...))`): a spec names them in
        `output_checks:`, and each runs on every answer of the run."""

    @hookspec
    def register_exporters(self, register: Callable[[Exporter], None]) -> None:
        """Register export formats (`register(Exporter(...))`): `promptlab export
        --format NAME`, the API's exports and the app's downloads write them."""

    @hookspec
    def register_routes(self, register: Callable[[PluginRoute], None]) -> None:
        """Register API routes (`register(PluginRoute(...))`), each with the role its
        caller needs; `promptlab serve` (and the app's API) serves them under
        `/v1/plugins/NAME`."""

    @hookspec
    def register_commands(self, cli: click.Group) -> None:
        """Add click commands to `cli` (`@cli.command()`): each becomes `promptlab NAME`."""
