"""The `promptlab` command: one group, commands contributed by focused modules."""

from __future__ import annotations

import atexit
import gc
import importlib
from collections.abc import Iterator, MutableMapping

import click

from promptlab.audit.redact import install_log_redaction
from promptlab.cli.common import db_option, handle_errors

#: The commands of each module of promptlab/cli/, by name: what `promptlab --help` lists
#: before any is imported. Each module's `commands` holds exactly these
#: (tests/test_batch_wire.py checks).
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "prompts": ("init", "prompt"),
    "fakellm": ("fakellm",),
    "runs": ("run", "batch", "batch-output", "resume", "pause", "status", "cancel"),
    "datasets": ("dataset",),
    "experiments": ("experiment", "assign", "exposures"),
    "rollouts": ("rollout",),
    "validate": ("validate",),
    "metrics": ("metrics", "compare"),
    "decide": ("decide",),
    "repeats": ("repeats",),
    "feedback": ("feedback", "logs"),
    "export": ("export",),
    "audit": ("audit",),
    "review": ("review",),
    "schedules": ("schedule",),
    "serve": ("serve",),
    "shards": ("shards",),
    "tokens": ("token",),
    "worker": ("worker",),
    "gateway": ("gateway",),
    "cache": ("cache",),
    "drift": ("drift",),
    "backup": ("backup", "restore"),
    "plugins": ("plugins",),
}


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name, each module imported at its first command's lookup
    (run, or listed by `--help`), not before: `promptlab batch` loads runs.py and none of
    the other seventeen command modules.

    click's documented lazy group keeps such commands out of `Group.commands`; this is
    `Group.commands` itself (click takes any mutable mapping there), so what reads it
    (click's own lookups and listings, the docs' and tests' walks) sees every command.
    Names are known without importing: `in` a built-in name imports nothing. Plugins'
    commands (promptlab/plugins/) load at the first name that is not promptlab's, or
    when the commands are listed.
    """

    def __init__(self, modules: dict[str, tuple[str, ...]]) -> None:
        self._module_of = {name: module for module, names in modules.items() for name in names}
        self._loaded: dict[str, click.Command] = {}
        self._plugged = False

    def _plug(self) -> None:
        """Add the plugins' commands (once); a name of promptlab's refuses its plugin."""
        if not self._plugged:
            self._plugged = True
            from promptlab.plugins.manager import plugins

            added = plugins().commands(taken=set(self._module_of) | set(self._loaded))
            for name, command in added.items():
                self._loaded.setdefault(name, command)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded and name not in self._module_of:
            self._plug()
        if name not in self._loaded and name in self._module_of:
            module = importlib.import_module(f"promptlab.cli.{self._module_of[name]}")
            for command in module.commands:
                if command.name is not None:
                    self._loaded.setdefault(command.name, command)  # an added one wins
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._loaded.pop(name, None)
        self._module_of.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        self._plug()
        yield from self._module_of
        yield from (name for name in self._loaded if name not in self._module_of)

    def __len__(self) -> int:
        return len(self._module_of.keys() | self._loaded.keys())

    def __contains__(self, name: object) -> bool:
        if name not in self._module_of and name not in self._loaded:
            self._plug()
        return name in self._module_of or name in self._loaded


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    commands=LazyCommands(COMMAND_MODULES),
)
@db_option
@click.version_option(package_name="promptlab")
@click.pass_context
@handle_errors  # a PROMPTLAB_LOG_FORMAT it cannot write is refused in one line
def main(ctx: click.Context) -> None:
    """promptlab: versioned prompts, A/B batches and their metrics, stored in DuckDB."""
    ctx.ensure_object(dict)
    install_log_redaction()


def console() -> None:
    """The `promptlab` process, by its console script or `python -m promptlab`."""
    # Exiting, the interpreter collects the whole heap (the imports' objects, mostly)
    # before freeing it: 0.1-0.2 s of every command's exit (bench/wire.py), freeing
    # nothing the OS does not take back. Frozen objects are not walked. At exit only:
    # a process that calls `main` itself (tests, the server) keeps collecting as it was.
    atexit.register(gc.freeze)
    main()
