"""`promptlab rollout status|pause|resume|abort`: guarded rollouts (an experiment's
`rollout:`), read and moved by hand. The server that owns the database checks them and
moves them along their stages by itself (server/periodic.py); through it these
call `/v1/rollouts/...`, without one they read and change the database directly."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from promptlab.cli.common import db_option, handle_errors, route, through

if TYPE_CHECKING:
    from promptlab.facades.rollouts import RolloutStatus
    from promptlab.workbench import Workbench


@click.group("rollout")
def rollout() -> None:
    """Guarded rollouts: a variant raised in stages, stopped by itself on a regression.

    An experiment file's `rollout:` names the variant, its stages (the ramp's percents),
    the units per arm a stage needs and the guardrails (error_rate, latency_p90_ms, ctr
    with the margin each may worsen by). The server checks them every few seconds.
    """


@rollout.command("status")
@db_option
@click.argument("name", required=False)
@click.pass_context
@handle_errors
def status(ctx: click.Context, name: str | None) -> None:
    """Each rollout's stage, units per arm and guardrails (or NAME's alone)."""
    from promptlab.facades.rollouts import RolloutStatus

    if name is None:

        def every(wb: Workbench) -> list[RolloutStatus]:
            return wb.rollouts.list()

        found = through(ctx, list[RolloutStatus], "GET", "/v1/rollouts", every)
        if not found:
            click.echo("no rollouts (an experiment file's `rollout:` starts one)")
        for each in found:
            _print(each)
        return

    def one(wb: Workbench) -> RolloutStatus:
        return wb.rollouts.status(name)

    _print(through(ctx, RolloutStatus, "GET", route("/v1/rollouts/{name}", name=name), one))


def _moving(action: str, summary: str) -> click.Command:
    @db_option
    @click.argument("name")
    @click.option("--note", default="", help="Why: kept with the decision.")
    @click.pass_context
    @handle_errors
    def command(ctx: click.Context, name: str, note: str) -> None:
        from promptlab.facades.rollouts import RolloutStatus

        def direct(wb: Workbench) -> RolloutStatus:
            moved: RolloutStatus = getattr(wb.rollouts, action)(name, note)
            return moved

        path = route("/v1/rollouts/{name}/" + action, name=name)
        _print(through(ctx, RolloutStatus, "POST", path, direct, {"note": note}))

    command.__doc__ = summary
    return click.command(action)(command)


rollout.add_command(_moving("pause", "Stop moving the rollout (its stage stays)."))
rollout.add_command(_moving("resume", "Check and move a paused or held rollout again."))
rollout.add_command(_moving("abort", "Every unit to control (the kill switch), for good."))


def _print(found: RolloutStatus) -> None:
    stage = "off its stages" if found.stage is None else f"stage {found.stage + 1}"
    shown = ", ".join(f"{s:g}%" for s in found.stages)
    click.echo(
        f"{found.experiment} (revision {found.revision}): {found.variant} {found.state}, "
        f"{stage} of {len(found.stages)} at {found.ramp:g}% ({shown})"
    )
    click.echo(
        f"  units: control {found.units_control:,}, {found.variant} {found.units_variant:,}; "
        f"this stage {found.stage_units:,} of {found.min_units_per_stage:,} per arm"
    )
    for row in found.guardrails:
        click.echo(f"  {row.line}")
    if found.last_action:
        click.echo(f"  last: {found.last_action}: {found.reason}")


commands: list[click.Command] = [rollout]
