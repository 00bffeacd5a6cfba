"""`promptlab cache stats / clear`, and the `--cache` option of the run commands.

The cache's commands print the same on the database file as through the server that
owns it (`/v1/cache`, server/cache_routes.py). `--cache` overrides a spec's `cache:`;
through a server it works for `run` (the spec goes there whole) and is refused for
`batch` and `experiment run`, whose servers' routes take no cache mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from promptlab.cli.common import db_option, handle_errors, through
from promptlab.errors import ConfigError

if TYPE_CHECKING:
    from promptlab.facades.runs import RunSpec
    from promptlab.records.cache import CacheStats
    from promptlab.workbench import Workbench

#: The spec's cache modes (promptlab/engine/spec/fields.py CACHE_MODES, which a test
#: keeps equal): written out so `--help` needs no engine.
CACHE_MODES = ("off", "read", "write", "readwrite")
_META = "promptlab.cache_mode"


def _remember(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[_META] = value


#: `--cache MODE` on `run`, `batch` and `experiment run`: read by `cache_mode(ctx)`.
cache_option = click.option(
    "--cache",
    type=click.Choice(CACHE_MODES),
    expose_value=False,
    callback=_remember,
    help="Use the response cache (over the spec's `cache:`): read answers identical "
    "requests from it, write keeps answers, readwrite both, off neither.",
)


def cache_mode(ctx: click.Context) -> str | None:
    """The `--cache` given, if any."""
    mode = ctx.meta.get(_META)
    return str(mode) if mode is not None else None


def data_with_cache(ctx: click.Context, data: Any) -> Any:
    """A spec as read (plain data) with `--cache` set over its own `cache:`, keeping
    its `any_temperature`."""
    mode = cache_mode(ctx)
    if mode is None or not isinstance(data, Mapping):
        return data
    given = data.get("cache")
    return {**data, "cache": {**given, "mode": mode} if isinstance(given, Mapping) else mode}


def spec_with_cache(ctx: click.Context, wb: Workbench, spec: RunSpec) -> RunSpec:
    """A spec made here (`batch`, `experiment run`) with `--cache` set, if given."""
    mode = cache_mode(ctx)
    return spec if mode is None else wb.cache.with_mode(spec, mode)


def refuse_remote_cache(ctx: click.Context, command: str) -> None:
    """`--cache` with `command` through a server: said in one line (usage, exit 2)."""
    if cache_mode(ctx) is not None:
        raise click.UsageError(
            f"--cache: `promptlab {command}` through a server takes no cache mode; put "
            "`cache:` in a run spec and use `promptlab run`, or stop the server"
        )


@click.group("cache")
def cache() -> None:
    """The response cache: answers runs with `cache:` (or --cache) reuse."""


@cache.command("stats")
@db_option
@click.pass_context
@handle_errors
def stats_command(ctx: click.Context) -> None:
    """Entries, bytes, answers given from the cache, oldest and newest, per endpoint
    and model."""
    from promptlab.records.cache import CacheStats

    stats = through(ctx, CacheStats, "GET", "/v1/cache", lambda wb: wb.cache.stats())
    for line in stats_lines(stats):
        click.echo(line)


@cache.command("clear")
@db_option
@click.option(
    "--older-than", metavar="AGE", help="Only entries stored longer ago: 30d, 12h, 2w, or a date."
)
@click.pass_context
@handle_errors(usage=(ConfigError,))
def clear_command(ctx: click.Context, older_than: str | None) -> None:
    """Remove the cache's entries (all, or those older than AGE); results stay."""
    body = {"older_than": older_than}
    removed = through(
        ctx, int, "POST", "/v1/cache/clear", lambda wb: wb.cache.clear(older_than), body
    )
    which = f" stored more than {older_than} ago" if older_than else ""
    entries = "entry" if removed == 1 else "entries"
    click.echo(f"removed {removed:,} cache {entries}{which}")


def stats_lines(stats: CacheStats) -> list[str]:
    """The cache as `cache stats` prints it: the totals, then a row per endpoint:model."""
    if not stats.entries and not stats.hits:
        return ["the response cache is empty (runs fill it with `cache: readwrite` or write)"]
    lines = [
        f"entries {stats.entries:,}, {_size(stats.bytes)} of outputs, "
        f"{stats.hits:,} answers given from the cache",
        f"oldest {_when(stats.oldest)}, newest {_when(stats.newest)}",
    ]
    rows = [("endpoint:model", "entries", "bytes", "hits", "oldest", "newest")]
    rows += [
        (
            f"{g.endpoint}:{g.model}",
            f"{g.entries:,}",
            _size(g.bytes),
            f"{g.hits:,}",
            _when(g.oldest),
            _when(g.newest),
        )
        for g in stats.groups
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]
    return lines


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1024**2:
        return f"{count / 1024:.1f} KiB"
    return f"{count / 1024**2:.1f} MiB"


def _when(at: Any) -> str:
    return "-" if at is None else f"{at:%Y-%m-%d %H:%M}"


commands: list[click.Command] = [cache]
