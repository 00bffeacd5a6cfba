"""What every CLI command shares: the --db option and turning errors into exit codes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from promptlab.audit.redact import redact
from promptlab.config import Settings
from promptlab.errors import PromptlabError
from promptlab.server.discovery import ServerInfo, find_server

if TYPE_CHECKING:
    from promptlab.workbench import Workbench

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes shared by all commands (documented in the README).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def _remember_db(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)["db"] = value


#: `--db` is accepted on the group (`promptlab --db F cmd`) and on every command.
db_option = click.option(
    "--db",
    type=click.Path(dir_okay=False),
    expose_value=False,
    is_eager=True,
    callback=_remember_db,
    help="DuckDB file to use (overrides PROMPTLAB_DB; default data/promptlab.duckdb).",
)


def settings_from(ctx: click.Context) -> Settings:
    """Settings from the environment, with any --db given on the command line."""
    root = ctx.find_root()
    db = (root.obj or {}).get("db") or (ctx.obj or {}).get("db")
    return Settings.from_env().with_db(Path(db) if db else None)


#: Commands that go through a server when one owns the database.
SERVED_COMMANDS = "run, batch, resume, cancel, status and batch-output"


def served(ctx: click.Context) -> ServerInfo | None:
    """The server that owns the command's database (promptlab serve), if one does."""
    return find_server(settings_from(ctx).db_path)


def open_workbench(ctx: click.Context) -> Workbench:
    """The facade on the command's database; close it (or use `with`) when done."""
    # Imported here, not at the top: the facade brings DuckDB, pyarrow and the engine,
    # which `--help`, usage errors and `fakellm` never need (see tests/test_startup.py).
    from promptlab.workbench import Workbench

    settings = settings_from(ctx)
    server = find_server(settings.db_path)
    if server is not None:
        raise PromptlabError(
            f"{settings.db_path} is served by `promptlab serve` at {server.url}: "
            f"{SERVED_COMMANDS} go through it; this command does not yet, so stop the "
            "server to use it"
        )
    return Workbench.open(settings)


def handle_errors(func: F | None = None, *, usage: tuple[type[BaseException], ...] = ()) -> Any:
    """Print promptlab errors as one line on stderr and exit non-zero, never a traceback.

    Errors of the `usage` classes exit EXIT_USAGE (a bad spec or argument), others
    EXIT_ERROR. Use as `@handle_errors` or `@handle_errors(usage=(SpecError,))`.
    """

    def decorate(inner: F) -> F:
        @functools.wraps(inner)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return inner(*args, **kwargs)
            except PromptlabError as exc:
                click.echo(f"error: {redact(str(exc))}", err=True)
                code = EXIT_USAGE if isinstance(exc, usage) else EXIT_ERROR
                raise SystemExit(code) from exc

        return wrapper  # type: ignore[return-value]

    return decorate(func) if func is not None else decorate
