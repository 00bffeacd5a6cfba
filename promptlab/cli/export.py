"""`promptlab export`: a result table to CSV, Parquet or JSON Lines, through DuckDB's COPY.

The facade is imported inside the command (it brings DuckDB): `--help` stays light.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench, served
from promptlab.data.export import (
    NEUTRALISED_HELP,
    RAW_HELP,
    TABLES,
    ExportFilters,
    check_format,
    check_items,
    check_table,
    file_name,
)
from promptlab.records.items import ItemFilter


@click.command("export", epilog=NEUTRALISED_HELP + " See --raw.")
@db_option
@click.option(
    "--table", "table", default="results", show_default=True, help=f"One of {', '.join(TABLES)}."
)
@click.option(
    "--format",
    "fmt",
    default="parquet",
    show_default=True,
    help="csv, parquet, jsonl, or a plugin's format (`promptlab plugins`).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="File to write (default: a name saying what it holds, in the current folder).",
)
@click.option("--run", "run_id", help="Only this run's rows.")
@click.option("--experiment", help="Only the rows of runs of this experiment.")
@click.option("--prompt", help="Only the rows of this prompt's versions.")
@click.option("--status", help="With --run: only items of this status (and their rows).")
@click.option("--variant", help="With --run: only this variant's items.")
@click.option("--error-kind", help="With --run: only items that failed with this kind.")
@click.option("--check", help="With --run: only items whose output check has this status.")
@click.option("--search", help="With --run: a key prefix, or text in the row, output or error.")
@click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
@click.pass_context
@handle_errors
def export_command(
    ctx: click.Context,
    table: str,
    fmt: str,
    output: Path | None,
    run_id: str | None,
    experiment: str | None,
    prompt: str | None,
    status: str | None,
    variant: str | None,
    error_kind: str | None,
    check: str | None,
    search: str | None,
    force: bool,
    raw: bool,
) -> None:
    """Write a table (items, results, attempts, metrics, comparisons, feedback) to a file.

    `promptlab export --run RUN_ID --table results --format parquet -o results.parquet`;
    `--status`, `--variant`, `--error-kind`, `--check` and `--search` keep the items the
    Runs page's filters keep (and their results and attempts), as its downloads do.
    """
    table, fmt = check_table(table), check_format(fmt)
    items = ItemFilter(status, variant, error_kind, check, search)
    filters = ExportFilters(run_id, experiment, prompt, items)
    check_items(table, filters)  # refused before anything is asked or written
    path = output or Path(file_name(table, fmt, filters))
    server = served(ctx)
    if server is not None:  # a job on the server; its file is written here
        from promptlab.server.client import ServerClient

        body = {
            "table": table,
            "format": fmt,
            "run_id": run_id,
            "experiment": experiment,
            "prompt": prompt,
            "items": asdict(items),
            "raw": raw,
        }
        client = ServerClient(server)
        count = client.job_file("/v1/jobs/table-exports", body, path, force=force)
    else:
        with open_workbench(ctx) as wb:
            count = wb.exports.write_table(
                table,
                fmt,
                path,
                run_id=run_id,
                experiment=experiment,
                prompt=prompt,
                items=items,
                force=force,
                raw=raw,
            )
    click.echo(f"wrote {count} rows to {path}")


commands: list[click.Command] = [export_command]
