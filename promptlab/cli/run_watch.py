"""A run started from this process's engine, followed to its end: the progress line
redrawn (and a provider-batch run's batch states said as they change), Ctrl-C to cancel,
then the summary and the exit code (`promptlab run`, `batch`, `resume`, `experiment run`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from promptlab.cli.common import EXIT_CANCELLED, next_line, open_workbench, run_exit_code
from promptlab.cli.run_text import print_summary, progress_line
from promptlab.views.batches import batch_lines

if TYPE_CHECKING:
    from promptlab.workbench import Workbench

#: Seconds between progress redraws on a terminal, and between lines when piped.
REDRAW_TTY_S = 0.5
REDRAW_PIPE_S = 5.0


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
    tty = sys.stderr.isatty()
    redraw = REDRAW_TTY_S if tty else REDRAW_PIPE_S
    last = 0.0
    batches: list[str] = []
    try:
        while wb.runs.is_active(run_id):
            wb.runs.wait(run_id, timeout=REDRAW_TTY_S)
            now = time.monotonic()
            if not quiet and now - last >= redraw and wb.runs.is_active(run_id):
                last = now
                batches = _batch_states(wb, run_id, batches, tty)
                line = progress_line(wb.runs.progress(run_id))
                click.echo(f"\r{line}\x1b[K" if tty else line, err=True, nl=not tty)
        if not quiet and tty:
            click.echo("", err=True)
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)


def _batch_states(wb: Workbench, run_id: str, said: list[str], tty: bool) -> list[str]:
    """A provider-batch run's batches, said again whenever a state or count changes."""
    chunks = wb.runs.batches(run_id)
    # Only states and counts: the "for N min" part changes at every look.
    shown = [f"{c.batch_id} {c.state} {c.succeeded} {c.failed}" for c in chunks]
    if chunks and shown != said:
        lines = batch_lines(chunks, time.time())
        click.echo(("\r\x1b[K" if tty else "") + "\n".join(lines), err=True)
    return shown
