"""`promptlab dataset ...`: import files as datasets, look at them, check them against a prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from promptlab.cli.common import (
    EXIT_ERROR,
    db_option,
    handle_errors,
    open_workbench,
    route,
    served,
    through,
)

if TYPE_CHECKING:
    from promptlab.records import DatasetInfo
    from promptlab.records.datasets import Conversation
    from promptlab.server.discovery import ServerInfo
    from promptlab.workbench import Workbench

#: Rows `dataset show` prints unless --rows says otherwise.
SHOWN_ROWS = 5


@click.group()
def dataset() -> None:
    """Manage datasets: import, list, show, check against a prompt, unit column, delete."""


@dataset.command("import")
@db_option
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="Dataset name: lowercase letters, digits, - _ .")
@click.option("--unit-column", help="Column naming the unit (a user, a customer) of experiments.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl", "parquet"]),
    help="Format of FILE (default: from its suffix, .csv .jsonl .ndjson .parquet).",
)
@click.option("--replace", is_flag=True, help="Replace a dataset of the same name.")
@click.option(
    "--conversation",
    is_flag=True,
    help="A conversation log: one message a row, in sessions (columns below).",
)
@click.option("--session-column", help="The log's session id column [session_id].")
@click.option("--order-column", help="Its turn number or timestamp column [turn].")
@click.option("--role-column", help="Its system/user/assistant column [role].")
@click.option("--content-column", help="Its message text column [content].")
@click.pass_context
@handle_errors
def import_(
    ctx: click.Context,
    file: Path,
    name: str,
    unit_column: str | None,
    fmt: str | None,
    replace: bool,
    conversation: bool,
    **columns: str | None,
) -> None:
    """Import FILE (CSV with a header row, JSON Lines objects, or Parquet) as a dataset.

    With --conversation (or any of its column options) FILE is a conversation log, one
    message a row: refused in one line when a role is unknown, a session id blank, or
    two messages of a session share an order value.
    """
    from promptlab.records.datasets import DEFAULT_CONVERSATION, Conversation

    log = None
    if conversation or any(columns.values()):
        given = {k.removesuffix("_column"): v for k, v in columns.items() if v}
        log = Conversation(**{**DEFAULT_CONVERSATION.columns(), **given})
    server = served(ctx)
    if server is not None:  # the file is read here and streamed to the server
        info = _upload(server, file, name, unit_column, fmt, replace, log)
    else:
        with open_workbench(ctx) as wb:
            info = wb.datasets.import_file(
                file, name, fmt=fmt, unit_column=unit_column, replace=replace, conversation=log
            )
    unit = f", unit column {info.unit_column}" if info.unit_column else ""
    click.echo(
        f"imported {info.name}: {info.row_count:,} rows, {len(info.columns)} columns{unit} "
        f"(from {info.source})"
    )


@dataset.command("list")
@db_option
@click.pass_context
@handle_errors
def list_datasets(ctx: click.Context) -> None:
    """List datasets with their rows, columns and unit column."""
    from promptlab.records import DatasetInfo

    infos = through(ctx, list[DatasetInfo], "GET", "/v1/datasets", lambda wb: wb.datasets.list())
    if not infos:
        click.echo("no datasets yet: try `promptlab dataset import FILE --name NAME`")
        return
    _print_table(
        ("NAME", "ROWS", "COLUMNS", "UNIT", "SOURCE", "IMPORTED"),
        [
            (
                i.name,
                f"{i.row_count:,}",
                str(len(i.columns)),
                i.unit_column or "-",
                i.source,
                f"{i.imported_at:%Y-%m-%d %H:%M}",
            )
            for i in infos
        ],
    )


@dataset.command("show")
@db_option
@click.argument("name")
@click.option("--rows", "rows", type=click.IntRange(min=0), default=SHOWN_ROWS, show_default=True)
@click.pass_context
@handle_errors
def show(ctx: click.Context, name: str, rows: int) -> None:
    """Show a dataset: its columns and types, row count, unit column and first rows."""
    server = served(ctx)
    if server is not None:
        info, lines = _shown(server, name, rows)
    else:
        with open_workbench(ctx) as wb:
            info = wb.datasets.get(name)
            first = wb.datasets.preview(name, rows)
        lines = iter([json.dumps(row, ensure_ascii=False) for row in first])
    click.echo(f"{info.name}: {info.row_count:,} rows from {info.source} ({info.format})")
    click.echo(f"imported {info.imported_at:%Y-%m-%d %H:%M:%S %Z} by {info.author}")
    click.echo(f"unit column: {info.unit_column or '-'}")
    click.echo("")
    _print_table(("COLUMN", "TYPE"), list(info.columns))
    for number, line in enumerate(lines, start=1):
        if number == 1:
            click.echo("")
        click.echo(f"{number}: {line}")


@dataset.command("session")
@db_option
@click.argument("name")
@click.argument("session", required=False)
@click.pass_context
@handle_errors
def session(ctx: click.Context, name: str, session: str | None) -> None:
    """A conversation log's sessions, or one SESSION's messages in order."""
    from promptlab.records import SessionSummary, Turn

    if session is None:
        path = route("/v1/datasets/{name}/sessions", name=name)
        summaries = through(
            ctx, list[SessionSummary], "GET", path, lambda wb: wb.datasets.sessions(name)
        )
        _print_table(
            ("SESSION", "MESSAGES", "USER TURNS", "FIRST", "LAST"),
            [(s.session, str(s.messages), str(s.user_turns), s.first, s.last) for s in summaries],
        )
        return
    path = route("/v1/datasets/{name}/sessions/{session}", name=name, session=session)
    turns = through(ctx, list[Turn], "GET", path, lambda wb: wb.datasets.session(name, session))
    if not turns:
        raise click.ClickException(f"dataset {name} has no session {session!r}")
    for turn in turns:
        click.echo(f"[{turn.order}] {turn.role}: {turn.content}")


@dataset.command("check")
@db_option
@click.argument("name")
@click.argument("prompt_ref")
@click.option(
    "--listed",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="How many problems to print (every bad row is counted).",
)
@click.pass_context
@handle_errors
def check(ctx: click.Context, name: str, prompt_ref: str, listed: int) -> None:
    """Check every row of NAME against PROMPT_REF's variables; exit 1 if a row is bad."""
    from urllib.parse import urlencode

    from promptlab.records import RowCheck

    query = urlencode({"prompt": prompt_ref, "listed": listed})
    path = f"{route('/v1/datasets/{name}/check', name=name)}?{query}"
    result = through(
        ctx, RowCheck, "GET", path, lambda wb: wb.datasets.check_rows(name, prompt_ref, listed)
    )
    for problem in result.problems:
        click.echo(str(problem))
    shown = len({p.row_number for p in result.problems})
    more = f" ({result.bad - shown:,} more not listed)" if result.bad > shown else ""
    click.echo(
        f"{result.valid:,} of {result.total:,} rows valid for {prompt_ref}, "
        f"{result.bad:,} bad{more}"
    )
    if result.bad:
        raise SystemExit(EXIT_ERROR)


@dataset.command("unit")
@db_option
@click.argument("name")
@click.argument("column")
@click.pass_context
@handle_errors
def unit(ctx: click.Context, name: str, column: str) -> None:
    """Make COLUMN the unit column of NAME (the unit an experiment assigns)."""
    from promptlab.records import DatasetInfo

    path = route("/v1/datasets/{name}/unit-column", name=name)
    info = through(
        ctx,
        DatasetInfo,
        "PUT",
        path,
        lambda wb: wb.datasets.set_unit_column(name, column),
        {"column": column},
    )
    click.echo(f"{info.name}: unit column {info.unit_column}")


@dataset.command("delete")
@db_option
@click.argument("name")
@click.pass_context
@handle_errors
def delete(ctx: click.Context, name: str) -> None:
    """Delete a dataset and its rows (runs keep their own copy of the rows they used)."""

    def deleted(wb: Workbench) -> dict[str, str]:
        wb.datasets.delete(name)
        return {"deleted": name}

    through(ctx, dict[str, str], "DELETE", route("/v1/datasets/{name}", name=name), deleted)
    click.echo(f"deleted {name}")


def _upload(
    server: ServerInfo,
    file: Path,
    name: str,
    unit_column: str | None,
    fmt: str | None,
    replace: bool,
    log: Conversation | None,
) -> DatasetInfo:
    """`dataset import` through a server: what the file is refused for before it is read
    (the name, the format, a missing or empty file) is said here, as on its own; then
    the file is streamed as the body of `POST /v1/datasets`."""
    from urllib.parse import urlencode

    from promptlab.data.datasets import MAX_FILE_BYTES, check_name
    from promptlab.data.readers import check_file, format_of
    from promptlab.records import DatasetInfo
    from promptlab.server.client import ServerClient
    from promptlab.server.typed import from_wire

    check_name(name)
    format_of(file, fmt)
    check_file(file, file.name, MAX_FILE_BYTES)
    query: dict[str, str] = {"name": name, "filename": file.name, "replace": str(replace).lower()}
    if unit_column:
        query["unit_column"] = unit_column
    if fmt:
        query["format"] = fmt
    for key, column in (log.columns() if log else {}).items():
        query[f"{key}_column"] = column
    answer = ServerClient(server, timeout_s=None).upload(f"/v1/datasets?{urlencode(query)}", file)
    return from_wire(DatasetInfo, answer)


def _shown(server: ServerInfo, name: str, rows: int) -> tuple[DatasetInfo, Iterator[str]]:
    """`dataset show` through a server: the dataset, and its first rows as the JSON
    lines it prints, streamed (any number of them)."""
    from promptlab.records import DatasetInfo
    from promptlab.server.client import ServerClient
    from promptlab.server.typed import from_wire

    client = ServerClient(server)
    answer = client.call("GET", f"{route('/v1/datasets/{name}', name=name)}?limit=1")
    info = from_wire(DatasetInfo, answer["dataset"])
    if rows == 0:
        return info, iter(())
    path = f"{route('/v1/datasets/{name}/rows', name=name)}?limit={rows}"
    return info, _lines(ServerClient(server, timeout_s=None).chunks(path))


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """The lines of a streamed answer, without their ends."""
    held = b""
    for chunk in chunks:
        held += chunk
        *whole, held = held.split(b"\n")
        for line in whole:
            yield line.decode("utf-8")
    if held:
        yield held.decode("utf-8")


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


commands: list[click.Command] = [dataset]
