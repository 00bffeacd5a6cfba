"""The plugins of this process: promptlab's own, then those of the `promptlab`
entry-point group (every one installed, or only those `PROMPTLAB_PLUGINS` names, comma
separated; set and empty: none), loaded once, at first need: a spec naming a scorer kind
that is not built in, a command name that is not promptlab's, or `promptlab plugins`.

A plugin that fails to import, or registers a name registered before it (a scorer kind,
a command), is refused: one line naming it and why, logged and listed by `promptlab
plugins`; the others still load.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pluggy

from promptlab.plugins import builtins
from promptlab.plugins.hookspecs import PROJECT, Specs

if TYPE_CHECKING:
    import click

    from promptlab.checks.plugged import TextCheck
    from promptlab.data.export import Exporter
    from promptlab.evaluation.scorers import ScorerKind
    from promptlab.providers import ProviderKind
    from promptlab.server.plugin_routes import PluginRoute

log = logging.getLogger(__name__)

#: The entry-point group plugins are found by, and the variable that picks among them.
GROUP = "promptlab"
ENV = "PROMPTLAB_PLUGINS"


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin: its name, its package's version and the hooks it implements."""

    name: str
    version: str | None
    hooks: tuple[str, ...]


@dataclass(frozen=True)
class Refusal:
    name: str
    reason: str


class Plugins:
    """The plugin manager of one process (`plugins()`)."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self._environ = environ
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(Specs)
        self._pm.register(builtins, name=PROJECT)
        #: Each loaded plugin's package version (promptlab's is read when listed: the
        #: metadata scan costs a run that never lists them).
        self._versions: dict[str, str | None] = {}
        self._lock = threading.RLock()
        self._external = False
        #: What each registering hook gave, by name (collected again as plugins load).
        self._kept: dict[str, dict[str, Any]] = {}
        self.refused: list[Refusal] = []

    # ---- loading --------------------------------------------------------------------

    def load(self) -> None:
        """Load the installed plugins PROMPTLAB_PLUGINS lets in (once)."""
        with self._lock:
            if self._external:
                return
            self._external = True
            from importlib.metadata import entry_points  # 13 ms: only when plugins load

            wanted = self._wanted()
            found = set()
            for point in entry_points(group=GROUP):
                if wanted is not None and point.name not in wanted:
                    continue
                found.add(point.name)
                self._register(point.name, point.load, point.dist.version if point.dist else None)
            for name in sorted((wanted or set()) - found):
                self.refuse(name, f"{ENV} names it, but no installed package gives it")
            self._kept.clear()  # collected again, with theirs

    def _wanted(self) -> set[str] | None:
        named = self._environ.get(ENV)
        if named is None:
            return None
        return {name.strip() for name in named.split(",") if name.strip()}

    def _register(self, name: str, load: Callable[[], Any], dist_version: str | None) -> None:
        if name == PROJECT or self._pm.has_plugin(name):
            self.refuse(name, "its name is taken by a plugin loaded before it")
            return
        try:
            plugin = load()
            self._pm.register(plugin, name=name)
        except Exception as exc:  # noqa: BLE001 - one plugin's failure is its own
            self.refuse(name, f"could not be loaded: {type(exc).__name__}: {exc}")
            return
        self._versions[name] = dist_version

    def refuse(self, name: str, reason: str) -> None:
        """Refuse plugin `name` (unregistered if it was), in one logged line."""
        with self._lock:
            plugin = self._pm.get_plugin(name)
            if plugin is not None:
                self._pm.unregister(plugin, name)
            self.refused.append(Refusal(name, reason))
            self._kept.clear()
        log.warning("plugin %s refused: %s", name, reason)

    # ---- what they register -----------------------------------------------------------

    def scorer_kinds(self, needed: str | None = None) -> dict[str, ScorerKind]:
        """Every scorer kind by name; the plugins load first unless `needed` is built in."""
        return self._registered("register_scorers", "scorer kind", needed)

    def exporters(self, needed: str | None = None) -> dict[str, Exporter]:
        """Every export format by name; the plugins load first unless `needed` is built in."""
        return self._registered("register_exporters", "export format", needed)

    def provider_kinds(
        self, needed: str | None = None, load: bool = True
    ) -> dict[str, ProviderKind]:
        """Every endpoint kind by name; the plugins load first unless `needed` is built in
        (or `load` is false: those loaded so far)."""
        return self._registered("register_providers", "provider kind", needed, load)

    def output_checks(self, needed: str | None = None) -> dict[str, TextCheck]:
        """Every output check kind by name (promptlab has none of its own: its schema and
        rules are each template's); the plugins load unless `needed` is known."""
        return self._registered("register_output_checks", "output check", needed)

    def routes(self) -> dict[str, PluginRoute]:
        """Every plugin's API routes (promptlab has none of its own here)."""
        return self._registered("register_routes", "route", None)

    def _registered(
        self, hook: str, what: str, needed: str | None, load: bool = True
    ) -> dict[str, Any]:
        """What the plugins register with `hook`, by name: those loaded so far (promptlab's
        own, at first), and all once one is needed that is not among them (unless not
        `load`)."""
        with self._lock:
            if hook not in self._kept:
                self._kept[hook] = self._collect(hook, what)
            if not load:
                return self._kept[hook]
            if (needed is None or needed not in self._kept[hook]) and not self._external:
                self.load()
                self._kept[hook] = self._collect(hook, what)
            return self._kept[hook]

    def _collect(self, hook: str, what: str) -> dict[str, Any]:
        """Each plugin's registrations in turn; one taking a name taken is refused."""
        found: dict[str, Any] = {}
        for name, impl in list(self._impls(hook)):
            mine: list[Any] = []
            if not self._called(name, impl, register=mine.append):
                return self._collect(hook, what)
            mine = [replace(item, plugin=name) for item in mine]
            taken = [item.name for item in mine if item.name in found]
            if taken:
                owner = found[taken[0]].plugin
                self.refuse(name, f"registers {what} {taken[0]!r}, which {owner} registered")
                return self._collect(hook, what)
            found |= {item.name: item for item in mine}
        return found

    def commands(self, taken: set[str]) -> dict[str, click.Command]:
        """The plugins' commands by name (loading them); one whose name is in `taken` (a
        built-in command's) or another plugin's refuses its plugin."""
        import click

        self.load()
        out: dict[str, click.Command] = {}
        for name, impl in list(self._impls("register_commands")):
            group = click.Group()
            if not self._called(name, impl, cli=group):
                continue
            clash = sorted(set(group.commands) & (taken | set(out)))
            if clash:
                self.refuse(name, f"adds command {clash[0]!r}, which is taken")
                continue
            out |= group.commands
        return out

    def _called(self, name: str, impl: Callable[..., Any], **arguments: Any) -> bool:
        """Call a plugin's hook; one that raises is refused (False)."""
        try:
            impl(**arguments)
        except Exception as exc:  # noqa: BLE001 - one plugin's failure is its own
            self.refuse(name, f"its {impl.__name__} failed: {type(exc).__name__}: {exc}")
            return False
        return True

    def _impls(self, hook: str) -> Iterator[tuple[str, Callable[..., Any]]]:
        """Each plugin's implementation of `hook`, in the order they were registered."""
        for impl in getattr(self._pm.hook, hook).get_hookimpls():
            yield self._pm.get_name(impl.plugin) or "?", impl.function

    def loaded(self) -> list[PluginInfo]:
        """What is loaded: promptlab's own first."""
        from importlib.metadata import version

        self.load()
        out = []
        for name, plugin in self._pm.list_name_plugin():
            hooks = sorted(h.name for h in self._pm.get_hookcallers(plugin) or [])
            known = version(PROJECT) if name == PROJECT else self._versions.get(name)
            out.append(PluginInfo(name, known, tuple(hooks)))
        return out


_PLUGINS: Plugins | None = None
_LOCK = threading.Lock()


def plugins() -> Plugins:
    """This process's plugins (made at first use)."""
    global _PLUGINS
    with _LOCK:
        if _PLUGINS is None:
            _PLUGINS = Plugins()
        return _PLUGINS


def reset_plugins(environ: Mapping[str, str] = os.environ) -> Plugins:
    """Start over with `environ` (tests: another PROMPTLAB_PLUGINS)."""
    global _PLUGINS
    with _LOCK:
        _PLUGINS = Plugins(environ)
        return _PLUGINS
