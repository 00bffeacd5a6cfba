"""`promptlab feedback import` and `promptlab logs import`: what users did with outputs,
and production requests, imported whole or not at all."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench, served, with_query

if TYPE_CHECKING:
    from promptlab.workbench import Workbench


@click.group()
def feedback() -> None:
    """Feedback events (impressions, clicks, thumbs, completions) on results or versions."""


@feedback.command("import")
@db_option
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@handle_errors
def import_feedback(ctx: click.Context, file: Path) -> None:
    """Import FILE (CSV, JSON Lines or Parquet) of feedback events.

    Columns: result_id (a result's id), or version and unit_id; kind (impression, click,
    thumbs_up, thumbs_down, completed); value (default 1); event_time (ISO 8601).
    A bad row refuses the whole file, naming its row and column.
    """
    path = with_query("/v1/feedback", filename=file.name)
    count = _imported(
        ctx, file, path, "a feedback file", lambda wb: wb.analysis.import_feedback(file)
    )
    click.echo(f"imported {count:,} feedback events from {file.name}")


@click.group()
def logs() -> None:
    """Production request logs: which prompt version served each request, and how it went."""


@logs.command("import")
@db_option
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--version-column", help="Column of the prompt version (default: version).")
@click.option("--unit-column", help="Column of the unit id (default: unit_id).")
@click.option("--latency-column", help="Column of the latency in ms (default: latency_ms).")
@click.option("--clicked-column", help="Column saying clicked, true/false (default: clicked).")
@click.option(
    "--completed-column", help="Column saying completed, true/false (default: completed)."
)
@click.option("--time-column", help="Column of the request time (default: event_time).")
@click.pass_context
@handle_errors
def import_logs(
    ctx: click.Context,
    file: Path,
    version_column: str | None,
    unit_column: str | None,
    latency_column: str | None,
    clicked_column: str | None,
    completed_column: str | None,
    time_column: str | None,
) -> None:
    """Import FILE (CSV, JSON Lines or Parquet), one production request a row.

    The version column holds a reference (name@1.2.0, name@label) or a version id.
    A bad row refuses the whole file, naming its row and column.
    """
    given = {
        "version": version_column,
        "unit_id": unit_column,
        "latency_ms": latency_column,
        "clicked": clicked_column,
        "completed": completed_column,
        "event_time": time_column,
    }
    columns = {field: column for field, column in given.items() if column is not None}
    pairs = [f"{field}:{column}" for field, column in columns.items()]
    path = with_query("/v1/logs", filename=file.name, column=pairs)
    count = _imported(
        ctx, file, path, "a log file", lambda wb: wb.analysis.import_logs(file, columns)
    )
    click.echo(f"imported {count:,} requests from {file.name}")


def _imported(
    ctx: click.Context, file: Path, path: str, what: str, direct: Callable[[Workbench], int]
) -> int:
    """Rows `direct(wb)` imported from `file`; when a server owns the database, the file
    is streamed to its upload route (`path`) and imported there: the server never opens
    a path a client names."""
    server = served(ctx)
    if server is None:
        with open_workbench(ctx) as wb:
            return direct(wb)
    from promptlab.data.readers import MAX_FILE_BYTES, check_file, format_of
    from promptlab.errors import DatasetError, FeedbackError
    from promptlab.server.client import ServerClient
    from promptlab.server.typed import from_wire

    try:  # what only this side can see, refused as the importer would
        format_of(file)
        check_file(file, file.name, MAX_FILE_BYTES, what)
    except DatasetError as exc:
        raise FeedbackError(str(exc)) from exc
    # No timeout: the answer comes once the whole file is imported.
    answer = ServerClient(server, timeout_s=None).upload(path, file)
    return from_wire(dict[str, int], answer)["rows"]


commands: list[click.Command] = [feedback, logs]
