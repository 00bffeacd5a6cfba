"""`promptlab cancel / pause`: stopping a run from outside the process that drives it.

Apart from runs.py (which starts, resumes and shows runs) because both ask a run to stop
and then wait, bounded, for it to settle, so their line says where it was left. They are
listed in runs.py's `commands`: cli/__init__.py's COMMAND_MODULES loads runs for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench, served
from promptlab.server.client import ServerClient


@click.command("cancel")
@db_option
@click.argument("run_id")
@click.pass_context
@handle_errors
def cancel_command(ctx: click.Context, run_id: str) -> None:
    """Cancel an interrupted run: its open items get final `cancelled` rows.

    A run in progress is cancelled with Ctrl-C in its terminal (or in the app): the
    database is held by that process. Served (`promptlab serve`), any run can be
    cancelled from here.
    """
    server = served(ctx)
    if server is not None:
        client = ServerClient(server)
        before = client.get(f"/v1/runs/{run_id}")["status"]
        after = client.post(f"/v1/runs/{run_id}/cancel")["status"]
        # A going run stops once its requests in flight are answered: wait for that
        # (bounded), so the line says where the cancel left it.
        deadline = time.monotonic() + CANCEL_WAIT_S
        while after in _GOING and time.monotonic() < deadline:
            time.sleep(CANCEL_POLL_S)
            after = client.get(f"/v1/runs/{run_id}")["status"]
        if after in _GOING:
            after = f"{after}, cancelling (its requests in flight are answered first)"
        click.echo(f"run {run_id}: {before} -> {after}")
        return
    with open_workbench(ctx) as wb:
        before = wb.runs.view(run_id).status
        wb.runs.cancel(run_id)
        after = wb.runs.view(run_id).status
    click.echo(f"run {run_id}: {before} -> {after}")


#: A run's states while it goes; a cancel through a server waits for it to leave them.
_GOING = frozenset({"submitted", "scheduled", "running"})
#: Seconds `cancel` waits for a going run to stop, and between two looks.
CANCEL_WAIT_S = 60.0
CANCEL_POLL_S = 0.1


@click.command("pause")
@db_option
@click.argument("run_id")
@click.pass_context
@handle_errors
def pause_command(ctx: click.Context, run_id: str) -> None:
    """Pause a running run: nothing more is sent, requests in flight finish and are
    recorded, pending items wait; `promptlab resume RUN_ID` continues it.

    The run must be driven by a server (`promptlab serve`, or the app serving the API),
    which this command then reaches, on this machine or across a cluster of workers.
    """
    server = served(ctx)
    if server is not None:
        client = ServerClient(server)
        before = client.get(f"/v1/runs/{run_id}")["status"]
        client.post(f"/v1/runs/{run_id}/pause")
        after = _settled(lambda: client.get(f"/v1/runs/{run_id}"))
        click.echo(f"run {run_id}: {before} -> {after}; `promptlab resume {run_id}` goes on")
        return
    with open_workbench(ctx) as wb:
        before = wb.runs.view(run_id).status
        wb.runs.pause(run_id)
        after = wb.runs.wait(run_id).status
    click.echo(f"run {run_id}: {before} -> {after}; `promptlab resume {run_id}` goes on")


#: Seconds `pause` waits for the requests in flight to finish before it answers.
PAUSE_WAIT_S = 120.0


def _settled(progress: Callable[[], dict[str, object]]) -> str:
    """The run's status once it is no longer active (or after PAUSE_WAIT_S)."""
    deadline = time.monotonic() + PAUSE_WAIT_S
    while True:
        now = progress()
        if not now["active"] or time.monotonic() > deadline:
            return str(now["status"])
        time.sleep(0.2)
