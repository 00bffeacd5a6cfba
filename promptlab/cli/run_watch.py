"""A run started from this process's engine, followed to its end: the progress line
redrawn (and a provider-batch run's batch states said as they change), Ctrl-C to cancel,
then the summary and the exit code (`promptlab run`, `batch`, `resume`, `experiment run`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from promptlab.cli.common import EXIT_CANCELLED, next_line, open_workbench, run_exit_code
from promptlab.cli.run_text import REDRAW_TTY_S, LiveProgress, print_summary

if TYPE_CHECKING:
    from promptlab.workbench import Workbench


def drive_run(
    ctx: click.Context,
    start: Callable[[Workbench], str | None],
    strict: bool,
    quiet: bool,
    output: Path | None = None,
) -> None:
    """Start a run (`start` returns its id, or None to stop there), watch it, summarize it."""
    with open_workbench(ctx) as wb:
        wb.engine  # noqa: B018 - start it now: a bad providers file is a clear error first
        run_id = start(wb)
        if run_id is None:
            return
        click.echo(f"run {run_id}")
        _watch(wb, run_id, quiet)
        wb.runs.wait(run_id)
        _wait_for_judges(wb, run_id)
        view = wb.runs.view(run_id)
        print_summary(view)
        if output is not None:
            count = wb.runs.write_batch_output(run_id, output)
            click.echo(f"  wrote {count} results to {output} (OpenAI Batch output format)")
        click.echo(
            next_line(run_id, view.status, batch=wb.runs.is_batch(run_id), wrote=output is not None)
        )
    # The run's final state decides: a Ctrl-C that came after the run completed is moot.
    failed_after = bool(view.after_run_failures)
    raise SystemExit(run_exit_code(view.status, view.counts.failed, strict, failed_after))


def _wait_for_judges(wb: Workbench, run_id: str) -> None:
    """Runs the run started as it ended (its judges, promptlab/evaluation/judges.py) end
    here too: this process's engine stops when the command returns."""
    for listed in wb.runs.list(20):
        other = listed.run.run_id
        if other != run_id and wb.runs.is_active(other):
            click.echo(f"  waiting for {listed.run.name} ({other})", err=True)
            wb.runs.wait(other)


def _watch(wb: Workbench, run_id: str, quiet: bool) -> None:
    """Show progress until the run ends; the first Ctrl-C cancels, the second quits now."""
    interrupts = 0

    def on_sigint(_signum: int, _frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            click.echo(
                "\ncancelling: in-flight requests finish; Ctrl-C again to quit now "
                "(then `promptlab resume " + run_id + "`)",
                err=True,
            )
            wb.runs.cancel(run_id)
        else:
            # Quit now, like a crash: the store keeps every final row written so far, and
            # resume sends what was in flight (answers not yet written are sent again).
            click.echo(f"\nstopped; continue with `promptlab resume {run_id}`", err=True)
            sys.stderr.flush()
            os._exit(EXIT_CANCELLED)

    # Called from a thread other than the main one (a test, an embedding): no signals.
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if main_thread else None
    live = LiveProgress(quiet)
    try:
        while wb.runs.is_active(run_id):
            wb.runs.wait(run_id, timeout=REDRAW_TTY_S)
            if live.due() and wb.runs.is_active(run_id):
                live.show(wb.runs.progress(run_id), wb.runs.batches(run_id))
        live.end()
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
