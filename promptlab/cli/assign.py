"""`promptlab assign` and `promptlab exposures import`: each unit's variant, and the
exposure logs of live traffic read in.

`promptlab assign FILE UNIT...` on an exported config never opens the database: a live
service may call it while the app holds the DuckDB file. It imports only the pure
`promptlab.experiments` package (no DuckDB, no engine), so it also starts fast.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench, route, served, through
from promptlab.data.lines import LineLimits, numbered_lines, open_lines
from promptlab.errors import ExperimentError


@click.command("assign")
@db_option
@click.argument("experiment_or_file")
@click.argument("units", nargs=-1)
@click.option(
    "--units",
    "units_file",
    type=click.Path(dir_okay=False, path_type=Path, allow_dash=True),
    help="A file of unit ids, one per line ('-' reads stdin).",
)
@click.option(
    "--log",
    "log_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append an exposure line per unit in the experiment (for `exposures import`).",
)
@click.pass_context
@handle_errors
def assign_command(
    ctx: click.Context,
    experiment_or_file: str,
    units: Sequence[str],
    units_file: Path | None,
    log_file: Path | None,
) -> None:
    """Print each unit's variant as one JSON line.

    EXPERIMENT_OR_FILE is an exported config file (the database is never opened) or an
    experiment's name (its latest revision, read from the database).
    """
    from promptlab.experiments import assign, exposure_line, load_experiment_config

    all_units = [*units, *(_read_units(units_file) if units_file else [])]
    if not all_units:
        raise click.UsageError("give unit ids as arguments or with --units FILE")
    if Path(experiment_or_file).is_file():
        config = load_experiment_config(experiment_or_file)
    else:
        from promptlab.experiments import ExperimentConfig

        path = route("/v1/experiments/{name}/revisions/latest", name=experiment_or_file)
        config = through(
            ctx, ExperimentConfig, "GET", path, lambda wb: wb.experiments.get(experiment_or_file)
        )
    now = datetime.now(UTC)
    exposures = []
    for unit in all_units:
        decided = assign(config, unit)
        click.echo(json.dumps(decided._asdict()))
        if decided.in_experiment:
            exposures.append(exposure_line(decided, config, now))
    if log_file is not None and exposures:
        try:
            with log_file.open("a", encoding="utf-8") as handle:
                handle.write("".join(line + "\n" for line in exposures))
        except OSError as exc:
            raise ExperimentError(f"cannot write {log_file}: {exc.strerror or exc}") from exc


@click.group()
def exposures() -> None:
    """Exposure logs of live traffic: import."""


@exposures.command("import")
@db_option
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@handle_errors
def import_exposures(ctx: click.Context, file: Path) -> None:
    """Import an exposure log (JSON Lines); a bad line refuses the whole file."""
    server = served(ctx)
    if server is not None:  # read here (refused as on its own if it cannot be) and sent
        from urllib.parse import urlencode

        from promptlab.experiments import EXPOSURE_LOG
        from promptlab.server.client import ServerClient

        with open_lines(file, f"exposures {file}", EXPOSURE_LOG, ExperimentError):
            pass
        query = urlencode({"filename": file.name, "source": str(file)})
        added = ServerClient(server, timeout_s=None).upload(f"/v1/exposures?{query}", file)
    else:
        with open_workbench(ctx) as wb:
            added = wb.experiments.import_exposures(file)
    click.echo(f"imported {added} new exposures from {file}")


#: A unit id is a customer or session id, tens of bytes. Every id is held in memory
#: until the whole file is read, so the file is capped at a few million of them.
UNITS_FILE = LineLimits(line_bytes=64 * 2**10, file_bytes=64 * 2**20, kind="a units file")


def _read_units(path: Path) -> Iterator[str]:
    if str(path) == "-":
        stdin = click.open_file("-", "rb")
        lines = numbered_lines(stdin, "units (stdin)", UNITS_FILE, ExperimentError)
        yield from _unit_ids(lines)
        return
    with open_lines(path, f"units {path}", UNITS_FILE, ExperimentError) as lines:
        yield from _unit_ids(lines)


def _unit_ids(lines: Iterator[tuple[int, str]]) -> Iterator[str]:
    return (text.strip() for _number, text in lines if text.strip())
