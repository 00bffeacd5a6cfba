"""`promptlab feedback import` and `promptlab logs import`: what users did with outputs,
and production requests, imported whole or not at all."""

from __future__ import annotations

from pathlib import Path

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench


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
    with open_workbench(ctx) as wb:
        count = wb.analysis.import_feedback(file)
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
    with open_workbench(ctx) as wb:
        count = wb.analysis.import_logs(file, columns)
    click.echo(f"imported {count:,} requests from {file.name}")


commands: list[click.Command] = [feedback, logs]
