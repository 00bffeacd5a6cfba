"""What every CLI command shares: the --db option and turning errors into exit codes."""

from __future__ import annotations

import contextlib
import functools
import os
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from promptlab.audit.redact import redact
from promptlab.config import Settings
from promptlab.errors import ConfigError, PromptlabError
from promptlab.server.discovery import SERVER_ENV, ServerInfo, discovery_path, find_server

if TYPE_CHECKING:
    from promptlab.server.client import ServerClient
    from promptlab.workbench import Workbench

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: Exit codes shared by all commands (documented in the README).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
#: Exit codes of the run commands (run, batch, resume, experiment run).
EXIT_CANCELLED = 3
EXIT_ITEMS_FAILED = 4
#: The run completed, but some of its after-run work (scores, a judge, a cross-check's
#: decisions or validation; promptlab/evaluation/ended.py) failed: the summary says which.
EXIT_AFTER_RUN_FAILED = 5


def provider_batch_option(func: F) -> F:
    """`--provider-batch`: send the run's requests through the provider's Batch API."""
    return click.option(
        "--provider-batch",
        is_flag=True,
        help="Send the requests through the provider's Batch API at the batch price (half), "
        "as `executor: provider-batch` in the spec would; answers take minutes to hours.",
    )(func)


def executor_of(distributed: bool, provider_batch: bool) -> str | None:
    """The executor the command line asks for (None: the spec's or the endpoint's own)."""
    if distributed and provider_batch:
        raise click.UsageError("--distributed and --provider-batch: choose one")
    if provider_batch:
        return "provider-batch"
    return "celery" if distributed else None


def run_exit_code(status: str, failed: int, strict: bool, after_run_failed: bool = False) -> int:
    """How a run command exits once its run ended in `status` with `failed` items (and
    its after-run work, when `after_run_failed`, failed)."""
    if status == "completed":
        if after_run_failed:
            return EXIT_AFTER_RUN_FAILED
        return EXIT_ITEMS_FAILED if strict and failed else EXIT_OK
    if status == "waiting":  # submitted as asked: it starts when what it comes after does
        return EXIT_OK
    if status in ("cancelled", "paused"):
        return EXIT_CANCELLED
    return EXIT_ERROR


def next_line(run_id: str, status: str, *, batch: bool, wrote: bool) -> str:
    """The run id once more, where the user's eyes are at the end, with the way on."""
    if status == "waiting":
        return (
            f"  run {run_id} waits for the runs it comes after and starts when they complete, "
            f"while `promptlab serve` or the app runs (`promptlab status {run_id}`)"
        )
    if status != "completed":
        return f"  run {run_id}: `promptlab resume {run_id}` finishes it"
    if batch and not wrote:
        return f"  run {run_id}: `promptlab batch-output {run_id} -o FILE` writes its results"
    return f"  run {run_id}"


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


def served(ctx: click.Context) -> ServerInfo | None:
    """The server that owns the command's database (promptlab serve, or the app serving
    the API), if one does: the command then calls its typed routes, and says once, on
    stderr, which server it went through (stdout stays as it is without one)."""
    db_path = settings_from(ctx).db_path
    server = find_server(db_path)
    meta = ctx.find_root().meta
    if server is not None and not meta.get(_SAID_SERVER):
        meta[_SAID_SERVER] = True
        click.echo(server_line(server, db_path), err=True)
    return server


_SAID_SERVER = "promptlab.said_server"


def server_line(server: ServerInfo, db_path: Path) -> str:
    """The one line naming the server a command goes through, and how it was found."""
    if os.environ.get(SERVER_ENV):  # named by the environment (another machine's, say)
        return f"through the promptlab server at {server.url} ({SERVER_ENV})"
    pid = f"pid {server.pid}, " if server.pid is not None else ""
    return f"through the promptlab server at {server.url} ({pid}{discovery_path(db_path)})"


def through(
    ctx: click.Context,
    typ: type[T],
    method: str,
    path: str,
    direct: Callable[[Workbench], T],
    body: Any = None,
) -> T:
    """`direct(wb)` on the command's database, or, when a server owns it, the same
    record from its typed route (`method path`): a view then prints it the same way."""
    with calls(ctx) as call:
        return call(typ, method, path, direct, body)


def route(template: str, **values: str) -> str:
    """`template` with each `{name}` filled by its value, quoted as one path segment."""
    return template.format(**{k: urllib.parse.quote(v, safe="") for k, v in values.items()})


def with_query(path: str, **params: str | int | bool | list[str] | None) -> str:
    """`path?name=value&...` of the parameters given (None left out; a list repeats its
    name; booleans as true/false)."""
    pairs = [
        (name, str(v).lower() if isinstance(v, bool) else str(v))
        for name, value in params.items()
        for v in (value if isinstance(value, list) else [value])
        if v is not None
    ]
    return f"{path}?{urllib.parse.urlencode(pairs)}" if pairs else path


class Calls:
    """A command's reads and changes, each on its database or from the server's typed
    route (see `through`), with one workbench or one client for all of them."""

    def __init__(self, wb: Workbench | None, client: ServerClient | None) -> None:
        self._wb = wb
        self._client = client

    def __call__(
        self,
        typ: type[T],
        method: str,
        path: str,
        direct: Callable[[Workbench], T],
        body: Any = None,
    ) -> T:
        if self._client is not None:
            from promptlab.server.typed import from_wire

            return from_wire(typ, self._client.call(method, path, body))
        assert self._wb is not None
        return direct(self._wb)


@contextlib.contextmanager
def calls(ctx: click.Context) -> Iterator[Calls]:
    """`Calls` for a command that reads or changes more than one thing: through the
    server that owns its database, or on the database opened once."""
    server = served(ctx)
    if server is not None:
        from promptlab.server.client import ServerClient

        yield Calls(None, ServerClient(server))
        return
    with open_workbench(ctx) as wb:
        yield Calls(wb, None)


def open_workbench(ctx: click.Context) -> Workbench:
    """The facade on the command's database; close it (or use `with`) when done.

    Commands ask `served` (or `through`) first: when a server owns the database they
    call its routes instead. One that reaches here with a server up is refused in one
    line rather than waiting on a file another process holds.
    """
    # Imported here, not at the top: the facade brings DuckDB, pyarrow and the engine,
    # which `--help`, usage errors and `fakellm` never need (see tests/test_startup.py).
    from promptlab.workbench import Workbench

    settings = settings_from(ctx)
    server = find_server(settings.db_path)
    if server is not None:
        raise ConfigError(
            f"{settings.db_path} is owned by the promptlab server at {server.url}, and this "
            "command does not go through it: stop the server to run it on the file"
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
