"""`promptlab experiment ...`: add, list, show, export, set and run experiments.

Its `commands` also carry `promptlab assign` and `promptlab exposures import`, which
live in cli/assign.py (they read exported configs and exposure logs, not revisions).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from promptlab.cli.assign import assign_command, exposures
from promptlab.cli.cache import cache_option, refuse_remote_cache, spec_with_cache
from promptlab.cli.common import (
    db_option,
    executor_of,
    handle_errors,
    open_workbench,
    provider_batch_option,
    route,
    served,
    through,
)
from promptlab.errors import ExperimentError, NotFoundError, SpecError

if TYPE_CHECKING:
    from promptlab.experiments import ExperimentConfig
    from promptlab.server.client import ServerClient
    from promptlab.server.discovery import ServerInfo
    from promptlab.workbench import Workbench


@click.group()
def experiment() -> None:
    """Sticky traffic splits over prompt variants: add, list, show, export, set."""


@experiment.command("add")
@db_option
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--note", default="", help="Why: kept with the new revision.")
@click.option(
    "--expect-revision",
    "based_on",
    type=click.IntRange(min=0),
    metavar="N",
    help="The revision your file changes (0: a new experiment); refused, naming "
    "who made the newer one and when, if the experiment has moved past it.",
)
@click.pass_context
@handle_errors
def add(ctx: click.Context, file: Path, note: str, based_on: int | None) -> None:
    """Add an experiment file; a changed file becomes a new revision."""
    from promptlab.experiments import ExperimentConfig, load_experiment_file

    experiment_file = load_experiment_file(file)  # fully checked before the database opens

    def direct(wb: Workbench) -> tuple[ExperimentConfig, bool]:
        return wb.experiments.add(experiment_file, note=note, based_on=based_on)

    body = {
        "experiment": experiment_file.content(),
        "source": experiment_file.source,
        "note": note,
        "based_on": based_on,
    }
    config, created = through(
        ctx, tuple[ExperimentConfig, bool], "POST", "/v1/experiments", direct, body
    )
    if created:
        click.echo(f"added {config.name} revision {config.revision}: {_split(config)}")
    else:
        click.echo(f"no changes: {config.name} is at revision {config.revision}")


@experiment.command("list")
@db_option
@click.pass_context
@handle_errors
def list_experiments(ctx: click.Context) -> None:
    """List experiments with their latest revision, split, ramp and kill switch."""
    from promptlab.experiments import ExperimentConfig

    configs = through(
        ctx, list[ExperimentConfig], "GET", "/v1/experiments", lambda wb: wb.experiments.list()
    )
    if not configs:
        click.echo("no experiments yet: try `promptlab experiment add FILE.yaml`")
        return
    rows = [
        (
            c.name,
            str(c.revision),
            c.mode,
            _state(c),
            _split(c),
            f"{c.created_at:%Y-%m-%d %H:%M}",
            c.author,
        )
        for c in configs
    ]
    _table(("NAME", "REV", "MODE", "STATE", "SPLIT", "UPDATED", "AUTHOR"), rows)


@experiment.command("show")
@db_option
@click.argument("name")
@click.option("--revision", type=click.IntRange(min=1), help="A past revision (default latest).")
@click.pass_context
@handle_errors
def show(ctx: click.Context, name: str, revision: int | None) -> None:
    """Show one experiment: variants, weights, allocation, ramp, kill switch, history."""
    from promptlab.experiments import describe_changes

    config, history, exposures = _shown(ctx, name, revision)
    click.echo(f"{config.name}  revision {config.revision} of {history[0].revision}")
    if config.description:
        click.echo(config.description)
    click.echo(
        f"mode: {config.mode}  unit column: {config.unit_column or '-'}  salt: {config.salt}"
    )
    click.echo(f"state: {_state(config)}")
    counts = config.bucket_counts()
    rows = []
    for v in config.variants:
        ranges = config.allocation[v.name]
        rows.append(
            (
                v.name,
                "control" if v.control else "treatment",
                f"{v.weight:g}",
                f"{counts[v.name]} ({counts[v.name] / 100:.2f}%)",
                ", ".join(f"[{s}, {e})" for s, e in ranges[:3])
                + (f" +{len(ranges) - 3} more" if len(ranges) > 3 else ""),
                v.prompt,
                (v.prompt_version_id or "-")[:15],
                v.model or "-",
                str(exposures.get((config.revision, v.name), 0)),
            )
        )
    click.echo("")
    _table(
        ("VARIANT", "ROLE", "WEIGHT", "BUCKETS", "RANGES", "PROMPT", "VERSION", "MODEL", "EXPOSED"),
        rows,
    )
    click.echo("\nhistory (newest first):")
    older = [*history[1:], None]
    _table(
        ("REV", "CREATED", "AUTHOR", "CHANGES", "NOTE"),
        [
            (
                str(h.revision),
                f"{h.created_at:%Y-%m-%d %H:%M}",
                h.author,
                "; ".join(describe_changes(before, h)),
                h.note or "-",
            )
            for h, before in zip(history, older, strict=True)
        ],
    )


@experiment.command("export")
@db_option
@click.argument("name")
@click.option("--revision", type=click.IntRange(min=1), help="A past revision (default latest).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@handle_errors
def export(ctx: click.Context, name: str, revision: int | None, output: Path | None) -> None:
    """Write the full config (allocation and pins included): what `promptlab assign` reads."""
    query = f"?revision={revision}" if revision is not None else ""
    path = route("/v1/experiments/{name}/export", name=name) + query
    text = through(ctx, str, "GET", path, lambda wb: wb.experiments.export(name, revision))
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ExperimentError(f"cannot write {output}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {output}")


@experiment.command("set")
@db_option
@click.argument("name")
@click.option("--weight", "weights", multiple=True, metavar="VARIANT=W", help="A new weight.")
@click.option("--ramp", type=click.FloatRange(0, 100), help="Percent of units in the experiment.")
@click.option("--kill", is_flag=True, help="Send every unit to control.")
@click.option("--revive", is_flag=True, help="Undo --kill: units get their variants again.")
@click.option("--note", default="", help="Why: kept with the new revision.")
@click.option(
    "--expect-revision",
    "based_on",
    type=click.IntRange(min=1),
    metavar="N",
    help="The revision you saw (`experiment show`); refused, naming who made the "
    "newer one and when, if the experiment has moved past it.",
)
@click.pass_context
@handle_errors
def set_command(
    ctx: click.Context,
    name: str,
    weights: Sequence[str],
    ramp: float | None,
    kill: bool,
    revive: bool,
    note: str,
    based_on: int | None,
) -> None:
    """Change weights, the ramp or the kill switch: a new revision with your note."""
    if kill and revive:
        raise click.UsageError("--kill and --revive contradict each other: give one")
    killed: bool | None = None
    if kill or revive:
        killed = kill
    if not weights and ramp is None and killed is None:
        raise click.UsageError("nothing to change: give --weight, --ramp, --kill or --revive")
    parsed = dict(_weight(text) for text in weights)
    from promptlab.experiments import ExperimentConfig, describe_changes

    def direct(wb: Workbench) -> tuple[ExperimentConfig, ExperimentConfig]:
        before = wb.experiments.get(name)
        after = wb.experiments.update(
            name, weights=parsed, ramp=ramp, killed=killed, note=note, based_on=based_on
        )
        return before, after

    body: dict[str, Any] = {"weights": parsed, "note": note, "based_on": based_on}
    # The ramp and the kill switch are an admin's: their own route (weights may come too).
    traffic = ramp is not None or killed is not None
    if traffic:
        body |= {"ramp": ramp, "killed": killed}
    path = route("/v1/experiments/{name}/" + ("traffic" if traffic else "weights"), name=name)
    before, after = through(
        ctx, tuple[ExperimentConfig, ExperimentConfig], "POST", path, direct, body
    )

    if after.revision == before.revision:
        click.echo(f"no changes: {name} is at revision {after.revision}")
    else:
        changes = "; ".join(describe_changes(before, after))
        click.echo(f"{name} revision {after.revision}: {changes}")


@experiment.command("run")
@db_option
@click.argument("name")
@click.option("--dataset", required=True, help="An imported dataset (promptlab dataset import).")
@click.option("--mode", type=click.Choice(["split", "all"]), help="Default: the experiment's.")
@click.option("--unit-column", help="Default: the experiment's, else the dataset's.")
@click.option("--repeats", type=click.IntRange(1, 1000), default=1, show_default=True)
@click.option("--limit-rows", type=click.IntRange(min=1), help="Only the first N rows.")
@click.option("--skip-invalid-rows", is_flag=True, help="Plan only rows every template accepts.")
@click.option("--estimate", "estimate_only", is_flag=True, help="Print the estimate; send nothing.")
@click.option(
    "--distributed",
    is_flag=True,
    help="Send the requests through Celery workers (`promptlab worker`).",
)
@provider_batch_option
@cache_option
@click.option("--strict", is_flag=True, help="Exit 4 when the run completes with failed items.")
@click.option("--quiet", is_flag=True, help="No progress bar; only the run id and summary.")
@click.pass_context
@handle_errors(usage=(SpecError, ExperimentError, NotFoundError))
def run_experiment(
    ctx: click.Context,
    name: str,
    dataset: str,
    mode: str | None,
    unit_column: str | None,
    repeats: int,
    limit_rows: int | None,
    skip_invalid_rows: bool,
    estimate_only: bool,
    distributed: bool,
    provider_batch: bool,
    strict: bool,
    quiet: bool,
) -> None:
    """Run the experiment's latest revision on a dataset: the estimate, then the run."""
    from promptlab.cli.runs import drive_run

    executor = executor_of(distributed, provider_batch)

    server = served(ctx)
    if server is not None:
        refuse_remote_cache(ctx, "experiment run")
        options = {
            "dataset": dataset,
            "mode": mode,
            "unit_column": unit_column,
            "repeats": repeats,
            "limit_rows": limit_rows,
            "skip_invalid_rows": skip_invalid_rows,
            "estimate_only": estimate_only,
            "executor": executor,
        }
        _run_on_server(server, name, options, strict, quiet)

    def start(wb: Workbench) -> str | None:
        spec = wb.runs.experiment_spec(
            name,
            dataset,
            mode=mode,
            unit_column=unit_column,
            repeats=repeats,
            limit_rows=limit_rows,
            skip_invalid_rows=skip_invalid_rows,
            executor=executor,
        )
        spec = spec_with_cache(ctx, wb, spec)
        from promptlab.views.estimate import estimate_lines

        for line in estimate_lines(wb.runs.estimate(spec)):
            click.echo(line)
        return None if estimate_only else wb.runs.start(spec)

    drive_run(ctx, start, strict, quiet)


def _run_on_server(
    server: ServerInfo, name: str, options: dict[str, Any], strict: bool, quiet: bool
) -> None:
    """`experiment run` through the server: print its estimate, then watch the run it
    starts and exit as `drive_run` does (with `estimate_only`, exit 0 after the estimate)."""
    from promptlab.cli.remote import drive_remote

    def submit(client: ServerClient) -> dict[str, Any]:
        answer: dict[str, Any] = client.post(
            f"/v1/experiments/{name}/runs", options, idempotent=True
        )
        for line in answer["estimate"]:
            click.echo(line)
        if answer["run"] is None:
            raise SystemExit(0)
        return dict(answer["run"])

    drive_remote(server, submit, strict, quiet)


def _shown(
    ctx: click.Context, name: str, revision: int | None
) -> tuple[ExperimentConfig, list[ExperimentConfig], dict[tuple[int, str], int]]:
    """What `experiment show` prints: the revision, every revision (newest first) and
    the units exposed per revision and variant."""
    server = served(ctx)
    if server is None:
        with open_workbench(ctx) as wb:
            config = wb.experiments.get(name, revision)
            return config, wb.experiments.history(name), wb.experiments.exposure_counts(name)
    from promptlab.experiments import ExperimentConfig
    from promptlab.server.client import ServerClient
    from promptlab.server.typed import from_wire

    client = ServerClient(server)
    one = route("/v1/experiments/{name}/revisions/{rev}", name=name, rev=str(revision or "latest"))
    config = from_wire(ExperimentConfig, client.call("GET", one))
    every = route("/v1/experiments/{name}/revisions", name=name)
    history = from_wire(list[ExperimentConfig], client.call("GET", every))
    counted = route("/v1/experiments/{name}/exposures", name=name)
    counts = from_wire(list[tuple[int, str, int]], client.call("GET", counted))
    return config, history, {(rev, variant): units for rev, variant, units in counts}


def _weight(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        weight = float(value)
    except ValueError:
        weight = -1.0
    if not sep or not name or weight < 0:
        raise click.UsageError(f"--weight {text!r}: expected VARIANT=WEIGHT, like staging=40")
    return name, int(weight) if weight.is_integer() else weight


def _split(config: ExperimentConfig) -> str:
    counts = config.bucket_counts()
    return ", ".join(f"{name} {counts[name] / 100:g}%" for name in config.allocation)


def _state(config: ExperimentConfig) -> str:
    if config.killed:
        return "killed (all to control)"
    return f"ramp {config.ramp:g}%"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


commands: list[click.Command] = [experiment, assign_command, exposures]
