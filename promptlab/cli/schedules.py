"""`promptlab schedule add|list|pause|resume|remove`: run specs on a cron schedule.

Schedules fire while a long-lived owner of the database runs (`promptlab serve`, or the
app serving the API); with one up, these commands run there and wake its scheduler.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from promptlab.cli.common import db_option, handle_errors, route, through
from promptlab.errors import ConfigError

if TYPE_CHECKING:
    from promptlab.records import ScheduleRecord
    from promptlab.workbench import Workbench


@click.group("schedule")
def schedule() -> None:
    """Run specs submitted on a cron schedule (UTC): add, list, pause, resume, remove.

    A spec with `schedule: "0 2 * * *"` is added with `promptlab schedule add FILE`;
    `promptlab serve` (or the app) submits it as a run each time it falls due. With
    `after: [NAME, ...]` its run waits for the newest runs of those names to complete
    (schedules due together fire in that order) and is skipped when one fails.
    """


@schedule.command("add")
@db_option
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--distributed", is_flag=True, help="Its runs send through Celery workers (`executor: celery`)."
)
@click.pass_context
@handle_errors(usage=(ConfigError,))
def add(ctx: click.Context, spec_file: Path, distributed: bool) -> None:
    """Add (or replace, by its name) the schedule of a run spec with `schedule:`."""
    from promptlab.errors import SpecError
    from promptlab.records import ScheduleRecord
    from promptlab.yamlio import read_yaml

    data = read_yaml(spec_file, error=SpecError)
    if distributed and isinstance(data, dict):
        data = {**data, "executor": "celery"}
    base_dir = spec_file.parent

    def direct(wb: Workbench) -> ScheduleRecord:
        spec = wb.runs.spec_from_data(data, base_dir=base_dir, default_name=spec_file.stem)
        return wb.schedules.add(spec)

    body = {"spec": data, "base_dir": str(base_dir.resolve()), "default_name": spec_file.stem}
    added = through(ctx, ScheduleRecord, "POST", "/v1/schedules", direct, body)
    click.echo(f"scheduled {added.name} ({added.cron}, UTC): next run at {_when(added.next_at)}")


@schedule.command("list")
@db_option
@click.pass_context
@handle_errors
def list_schedules(ctx: click.Context) -> None:
    """Every schedule: its cron, state, next time, and its last run and how it ended."""
    from promptlab.records import ScheduleRecord

    schedules = through(
        ctx, list[ScheduleRecord], "GET", "/v1/schedules", lambda wb: wb.schedules.list()
    )
    if not schedules:
        click.echo("no schedules (add one: promptlab schedule add SPEC_FILE)")
        return
    for s in schedules:
        state = "paused" if s.paused else "active"
        last_run = f"last {s.last_run_id} {s.last_status}" if s.last_run_id else "never run"
        after = f"  after {', '.join(s.after)}" if s.after else ""
        click.echo(f"{s.name}  {s.cron}  {state}  next {_when(s.next_at)}  {last_run}{after}")
        if s.last_error:
            click.echo(f"  last firing submitted nothing: {s.last_error}")


@schedule.command("pause")
@db_option
@click.argument("name")
@click.pass_context
@handle_errors
def pause(ctx: click.Context, name: str) -> None:
    """Stop submitting a schedule's runs (runs already going go on)."""
    from promptlab.records import ScheduleRecord

    path = route("/v1/schedules/{name}/pause", name=name)
    through(ctx, ScheduleRecord, "POST", path, lambda wb: wb.schedules.pause(name))
    click.echo(f"paused {name}")


@schedule.command("resume")
@db_option
@click.argument("name")
@click.pass_context
@handle_errors
def resume(ctx: click.Context, name: str) -> None:
    """Submit a paused schedule again, from its next time after now."""
    from promptlab.records import ScheduleRecord

    path = route("/v1/schedules/{name}/resume", name=name)
    resumed = through(ctx, ScheduleRecord, "POST", path, lambda wb: wb.schedules.resume(name))
    click.echo(f"resumed {name}: next run at {_when(resumed.next_at)}")


@schedule.command("remove")
@db_option
@click.argument("name")
@click.pass_context
@handle_errors
def remove(ctx: click.Context, name: str) -> None:
    """Remove a schedule (its runs stay)."""
    path = route("/v1/schedules/{name}", name=name)

    def removed(wb: Workbench) -> dict[str, str]:
        wb.schedules.remove(name)
        return {"removed": name}

    through(ctx, dict[str, str], "DELETE", path, removed)
    click.echo(f"removed {name}")


def _when(at: datetime | None) -> str:
    return "-" if at is None else f"{at:%Y-%m-%d %H:%M} UTC"


commands: list[click.Command] = [schedule]
