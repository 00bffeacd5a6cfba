"""`promptlab dataset ...`: import files as datasets, look at them, check them against a prompt."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import click

from promptlab.cli.common import EXIT_ERROR, db_option, handle_errors, open_workbench

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
    ctx: click.Context, file: Path, name: str, unit_column: str | None, fmt: str | None,
    replace: bool, conversation: bool, **columns: str | None,
) -> None:  # fmt: skip
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
    with open_workbench(ctx) as wb:
        infos = wb.datasets.list()
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
    with open_workbench(ctx) as wb:
        info = wb.datasets.get(name)
        first = wb.datasets.preview(name, rows)
    click.echo(f"{info.name}: {info.row_count:,} rows from {info.source} ({info.format})")
    click.echo(f"imported {info.imported_at:%Y-%m-%d %H:%M:%S %Z} by {info.author}")
    click.echo(f"unit column: {info.unit_column or '-'}")
    click.echo("")
    _print_table(("COLUMN", "TYPE"), list(info.columns))
    if first:
        click.echo("")
        for number, row in enumerate(first, start=1):
            click.echo(f"{number}: {json.dumps(row, ensure_ascii=False)}")


@dataset.command("session")
@db_option
@click.argument("name")
@click.argument("session", required=False)
@click.pass_context
@handle_errors
def session(ctx: click.Context, name: str, session: str | None) -> None:
    """A conversation log's sessions, or one SESSION's messages in order."""
    with open_workbench(ctx) as wb:
        if session is None:
            summaries = wb.datasets.sessions(name)
            _print_table(
                ("SESSION", "MESSAGES", "USER TURNS", "FIRST", "LAST"),
                [
                    (s.session, str(s.messages), str(s.user_turns), s.first, s.last)
                    for s in summaries
                ],  # fmt: skip
            )
            return
        turns = wb.datasets.session(name, session)
    if not turns:
        raise click.ClickException(f"dataset {name} has no session {session!r}")
    for turn in turns:
        click.echo(f"[{turn.order}] {turn.role}: {turn.content}")


@dataset.command("check")
@db_option
@click.argument("name")
@click.argument("prompt_ref")
@click.option(
    "--listed", type=click.IntRange(min=0), default=100, show_default=True,
    help="How many problems to print (every bad row is counted).",
)  # fmt: skip
@click.pass_context
@handle_errors
def check(ctx: click.Context, name: str, prompt_ref: str, listed: int) -> None:
    """Check every row of NAME against PROMPT_REF's variables; exit 1 if a row is bad."""
    with open_workbench(ctx) as wb:
        result = wb.datasets.check_rows(name, prompt_ref, listed)
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
    with open_workbench(ctx) as wb:
        info = wb.datasets.set_unit_column(name, column)
    click.echo(f"{info.name}: unit column {info.unit_column}")


@dataset.command("delete")
@db_option
@click.argument("name")
@click.pass_context
@handle_errors
def delete(ctx: click.Context, name: str) -> None:
    """Delete a dataset and its rows (runs keep their own copy of the rows they used)."""
    with open_workbench(ctx) as wb:
        wb.datasets.delete(name)
    click.echo(f"deleted {name}")


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


commands: list[click.Command] = [dataset]
