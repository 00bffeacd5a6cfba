"""`promptlab run / resume / status / cancel`: batch runs through the shared engine.

Exit codes of `run` and `resume` (documented in the README):
0 the run completed (every item has its final row; failed items are counted in the
summary), 1 the run failed (stopped on quota or auth, or an internal error),
2 bad spec or usage, 3 the run was cancelled (Ctrl-C), 4 completed with failed items
and `--strict` given.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import click

from promptlab.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, db_option, open_store
from promptlab.engine import Engine, RunProgress, SpecError, load_spec
from promptlab.errors import PromptlabError
from promptlab.records import RunStatus, RunSummary
from promptlab.store import ReadModels, RunStore

EXIT_CANCELLED = 3
EXIT_ITEMS_FAILED = 4
#: Seconds between progress redraws on a terminal, and between lines when piped.
REDRAW_TTY_S = 0.5
REDRAW_PIPE_S = 5.0
BAR_WIDTH = 28


@click.command("run")
@db_option
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--strict", is_flag=True, help="Exit 4 when the run completes with failed items.")
@click.option("--quiet", is_flag=True, help="No progress bar; only the run id and summary.")
@click.pass_context
def run_command(ctx: click.Context, spec_file: Path, strict: bool, quiet: bool) -> None:
    """Run a YAML run spec; print the run id, a progress bar and a summary."""
    try:
        spec = load_spec(spec_file)
    except SpecError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_USAGE) from exc
    _drive(ctx, lambda engine: engine.submit(spec), strict, quiet, bad_spec_is_usage=True)


@click.command("resume")
@db_option
@click.argument("run_id")
@click.option("--strict", is_flag=True, help="Exit 4 when the run completes with failed items.")
@click.option("--quiet", is_flag=True, help="No progress bar; only the summary.")
@click.pass_context
def resume_command(ctx: click.Context, run_id: str, strict: bool, quiet: bool) -> None:
    """Resume a run that was interrupted, cancelled or stopped; finished items are kept."""
    _drive(ctx, lambda engine: engine.resume(run_id), strict, quiet, bad_spec_is_usage=False)


@click.command("status")
@db_option
@click.argument("run_id", required=False)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.pass_context
def status_command(ctx: click.Context, run_id: str | None, limit: int) -> None:
    """Show one run (counts, timestamps, failures) or list recent runs."""
    try:
        with open_store(ctx) as store:
            runs, reads = RunStore(store), ReadModels(store)
            if run_id is None:
                listed = reads.list_runs_with_counts(limit)
                if not listed:
                    click.echo("no runs yet")
                for entry in listed:
                    r = entry.run
                    click.echo(
                        f"{r.run_id}  {r.status:<9}  {entry.items.finished}/{r.total_items}  "
                        f"{r.submitted_at:%Y-%m-%d %H:%M}  {r.name}"
                    )
                return
            record = runs.get_run(run_id)
            counts = reads.item_counts(run_id)
            click.echo(f"run {record.run_id} ({record.name}): {record.status}")
            if record.status_reason:
                click.echo(f"  reason: {record.status_reason}")
            click.echo(
                f"  items: {record.total_items}  "
                + "  ".join(f"{k}={v}" for k, v in counts.items())
            )
            for status, reason, at in runs.events(run_id):
                click.echo(
                    f"  {at:%Y-%m-%d %H:%M:%S}  {status}" + (f"  ({reason})" if reason else "")
                )
            kinds = reads.failure_kinds(run_id)
            if kinds:
                click.echo("  failures: " + ", ".join(f"{k}={v}" for k, v in kinds.items()))
                for failure in reads.failure_examples(run_id, FAILURES_SHOWN):
                    click.echo(
                        f"    dataset row {failure.row_index + 1} ({failure.variant}): "
                        f"{failure.error_kind}: {failure.message}"
                    )
    except PromptlabError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_ERROR) from exc


#: Failed items `status RUN_ID` lists with their messages (the counts cover them all).
FAILURES_SHOWN = 10


@click.command("cancel")
@db_option
@click.argument("run_id")
@click.pass_context
def cancel_command(ctx: click.Context, run_id: str) -> None:
    """Cancel an interrupted run: its open items get final `cancelled` rows.

    A run in progress is cancelled with Ctrl-C in its terminal (or in the app): the
    database is held by that process.
    """
    try:
        with open_store(ctx) as store:
            runs = RunStore(store)
            before = runs.get_run(run_id).status
            with Engine(store) as engine:
                engine.cancel(run_id)
            after = runs.get_run(run_id).status
    except PromptlabError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_ERROR) from exc
    click.echo(f"run {run_id}: {before} -> {after}")


def _drive(
    ctx: click.Context,
    start: object,
    strict: bool,
    quiet: bool,
    *,
    bad_spec_is_usage: bool,
) -> None:
    try:
        store = open_store(ctx)
        engine = Engine(store)  # reads the providers file: a bad one is a clear error
    except PromptlabError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_ERROR) from exc
    with store, engine:
        try:
            run_id = start(engine)  # type: ignore[operator]
        except PromptlabError as exc:
            click.echo(f"error: {exc}", err=True)
            code = EXIT_USAGE if bad_spec_is_usage and _is_spec_problem(exc) else EXIT_ERROR
            raise SystemExit(code) from exc
        click.echo(f"run {run_id}")
        _watch(engine, run_id, quiet)
        final = engine.wait(run_id)
        summary = engine.reads.summary(run_id)
        _print_summary(final, summary)
    # The run's final state decides: a Ctrl-C that came after the run completed is moot.
    raise SystemExit(_exit_code(final, strict))


def _is_spec_problem(exc: PromptlabError) -> bool:
    from promptlab.errors import ConfigError, RegistryError, TemplateError

    return isinstance(exc, ConfigError | RegistryError | TemplateError)


def _watch(engine: Engine, run_id: str, quiet: bool) -> None:
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
            engine.cancel(run_id)
        else:
            # Quit now, like a crash: the store keeps every final row written so far, and
            # resume sends what was in flight (answers not yet written are sent again).
            click.echo(f"\nstopped; continue with `promptlab resume {run_id}`", err=True)
            sys.stderr.flush()
            os._exit(EXIT_CANCELLED)

    previous = signal.signal(signal.SIGINT, on_sigint)
    tty = sys.stderr.isatty()
    redraw = REDRAW_TTY_S if tty else REDRAW_PIPE_S
    last = 0.0
    try:
        while engine.is_active(run_id):
            engine.wait(run_id, timeout=REDRAW_TTY_S)
            now = time.monotonic()
            if not quiet and now - last >= redraw and engine.is_active(run_id):
                last = now
                line = progress_line(engine.status(run_id))
                click.echo(f"\r{line}\x1b[K" if tty else line, err=True, nl=not tty)
        if not quiet and tty:
            click.echo("", err=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def progress_line(p: RunProgress) -> str:
    """One line: bar, counts, throughput, ETA and the limiter state."""
    filled = int(BAR_WIDTH * p.fraction)
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    rate = f"{p.throughput_per_s:.1f}/s" if p.throughput_per_s is not None else "-/s"
    eta = f"ETA {p.eta_s:.0f}s" if p.eta_s is not None else "ETA -"
    parts = [
        f"[{bar}] {p.done}/{p.total}",
        f"ok {p.succeeded} failed {p.failed} in flight {p.in_flight} queued {p.pending}",
        f"{rate} {eta}",
    ]
    for lim in p.limiters:
        rpm = f"{lim.rpm:.0f}rpm" if lim.rpm is not None else "rpm -"
        gate = f" gate until {lim.gate_closed_until:%H:%M:%S}" if lim.gate_closed_until else ""
        parts.append(f"{lim.name}: {rpm} conc {lim.concurrency}{gate}")
    return " | ".join(parts)


def _print_summary(p: RunProgress, summary: RunSummary) -> None:
    click.echo(f"run {p.run_id}: {p.status}" + (f" ({p.reason})" if p.reason else ""))
    click.echo(
        f"  items {p.total}: succeeded {p.succeeded}, failed {p.failed}, cancelled {p.cancelled}"
    )
    if p.started_at and p.finished_at:
        click.echo(f"  wall time {(p.finished_at - p.started_at).total_seconds():.1f} s")
    click.echo(
        f"  attempts {summary.attempts} (429s {summary.rate_limited_attempts}), "
        f"tokens in {summary.input_tokens} out {summary.output_tokens}, "
        f"cost ${summary.cost_usd:.4f}"
    )


def _exit_code(p: RunProgress, strict: bool) -> int:
    if p.status == RunStatus.COMPLETED:
        return EXIT_ITEMS_FAILED if strict and p.failed else EXIT_OK
    if p.status == RunStatus.CANCELLED:
        return EXIT_CANCELLED
    return EXIT_ERROR


commands: list[click.Command] = [run_command, resume_command, status_command, cancel_command]
