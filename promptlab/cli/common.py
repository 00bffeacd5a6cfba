"""What every CLI command shares: the --db option and turning errors into exit codes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from promptlab.config import Settings
from promptlab.errors import PromptlabError
from promptlab.store import Store

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


def open_store(ctx: click.Context) -> Store:
    return Store(settings_from(ctx).db_path)


def handle_errors(func: F) -> F:
    """Print promptlab errors as one line on stderr and exit non-zero, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except PromptlabError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(EXIT_ERROR) from exc

    return wrapper  # type: ignore[return-value]
