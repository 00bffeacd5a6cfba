"""A run as the terminal shows it: `status RUN_ID`'s view, the live progress (the line,
a provider-batch run's batches) and the summary a run command ends with; the same here
(promptlab/cli/run_watch.py) as through a server (promptlab/cli/remote.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from promptlab.facades.runs import RunProgress, RunView
    from promptlab.providers.batches.ledger import ChunkView

BAR_WIDTH = 28
#: Seconds between progress redraws on a terminal, and between lines when piped.
REDRAW_TTY_S = 0.5
REDRAW_PIPE_S = 5.0


def print_view(view: RunView) -> None:
    """`promptlab status RUN_ID`: counts, events, variants side by side, alerts, failures."""
    c = view.counts
    failed_after = "; after-run work failed" if view.after_run_failures else ""
    click.echo(f"run {view.run_id} ({view.run.name}): {view.run.state}{failed_after}")
    if view.reason:
        click.echo(f"  reason: {view.reason}")
    for line in view.after_run_failures:
        click.echo(f"  after-run work failed: {line}")
    if view.run.process_gone:
        click.echo(f"  the process running it is gone; go on with: {view.run.resume_command}")
    click.echo(
        f"  items: {view.total}  pending={c.pending}  in_flight={c.in_flight}  "
        f"succeeded={c.succeeded}  failed={c.failed}  cancelled={c.cancelled}"
    )
    for status, reason, at in view.events:
        click.echo(f"  {at:%Y-%m-%d %H:%M:%S}  {status}" + (f"  ({reason})" if reason else ""))
    if view.batches:
        from promptlab.views.batches import batch_lines

        click.echo(f"  provider batches ({len(view.batches)}):")
        for line in batch_lines(view.batches, time.time()):
            click.echo(f"    {line}")
    click.echo("  variants (complete: succeeded and valid, repaired or no schema):")
    for line in variant_table(view):
        click.echo(f"    {line}")
    if view.alerts:
        click.echo(f"  alerts ({len(view.alerts)}):")
        for alert in view.alerts:
            click.echo(f"    {alert.kind}: {alert.message}")
    if view.field_failures:
        click.echo("  output fields that fail most:")
        for line in field_lines(view):
            click.echo(f"    {line}")
    if view.failure_kinds:
        kinds = view.failure_kinds.items()
        click.echo("  failures: " + ", ".join(f"{k}={v}" for k, v in kinds))
        for failure in view.failures:
            click.echo(
                f"    dataset row {failure.row_index + 1} ({failure.variant}): "
                f"{failure.error_kind}: {failure.message}"
            )


def variant_table(view: RunView) -> list[str]:
    """The per-variant summary as aligned text lines, a header first."""
    header = (
        "variant",
        "model",
        "ok",
        "failed",
        "cancel",
        "open",
        "complete",
        "valid",
        "repaired",
        "truncated",
        "rules failed",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "tokens",
        "cost $",
    )
    rows: list[tuple[str, ...]] = [header]
    for v in view.variants:
        rows.append(
            (
                v.name,
                f"{v.endpoint}:{v.model}",
                str(v.succeeded),
                str(v.failed),
                str(v.cancelled),
                str(v.open),
                *(
                    _percent(x)
                    for x in (
                        v.completion_rate,
                        v.validity_rate,
                        v.repair_rate,
                        v.truncation_rate,
                        v.rule_failure_rate,
                    )
                ),
                *(
                    f"{x:.0f}" if x is not None else "-"
                    for x in (v.latency_p50_ms, v.latency_p90_ms, v.latency_p99_ms)
                ),
                str(v.input_tokens + v.output_tokens),
                f"{v.cost_usd:.4f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return [
        "  ".join(
            cell.ljust(w) if i < 2 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def field_lines(view: RunView) -> list[str]:
    """The output paths that fail their check most, per variant, as aligned lines."""
    rows: list[tuple[str, ...]] = [("variant", "path", "outputs", "most common error")]
    for f in view.field_failures:
        rows.append((f.variant, f.path, str(f.outputs), f.example))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return [
        "  ".join(
            [row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]), row[3]]
        ).rstrip()
        for row in rows
    ]


def _percent(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


def progress_line(p: RunProgress) -> str:
    """One line: bar, counts, throughput, ETA and the limiter state."""
    from promptlab.records import RunStatus  # loaded already: a run is being watched

    if p.status == RunStatus.SUBMITTED and p.total == 0:
        return f"planning {p.name}: reading the dataset"
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


class LiveProgress:
    """What a run command prints on stderr while it follows a run, from the same records
    here and through a server: a provider-batch run's batches whenever a state or count
    changes, then the progress line; redrawn in place on a terminal every REDRAW_TTY_S,
    a line every REDRAW_PIPE_S when piped; nothing with `quiet`."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._last: float | None = None
        self._said: list[str] = []

    def due(self) -> bool:
        """Whether `show` would print now (the caller then reads what it shows)."""
        every = REDRAW_TTY_S if self.tty else REDRAW_PIPE_S
        return not self.quiet and (self._last is None or time.monotonic() - self._last >= every)

    def show(self, progress: RunProgress, batches: Sequence[ChunkView]) -> None:
        """Print the run's progress (and its batches, if they changed since last shown)."""
        from promptlab.views.batches import batch_lines

        self._last = time.monotonic()
        # Only states and counts: the "for N min" part changes at every look.
        shown = [f"{c.batch_id} {c.state} {c.succeeded} {c.failed}" for c in batches]
        if batches and shown != self._said:
            lines = batch_lines(batches, time.time())
            click.echo(("\r\x1b[K" if self.tty else "") + "\n".join(lines), err=True)
        self._said = shown
        line = progress_line(progress)
        click.echo(f"\r{line}\x1b[K" if self.tty else line, err=True, nl=not self.tty)

    def end(self) -> None:
        """The run ended: a redrawn line is left on its own line."""
        if not self.quiet and self.tty and self._last is not None:
            click.echo("", err=True)


def print_summary(view: RunView) -> None:
    """The end of a run command: status, counts, wall time, attempts, the variants."""
    c, s = view.counts, view.summary
    failed_after = "; after-run work failed" if view.after_run_failures else ""
    said = f" ({view.reason})" if view.reason else ""
    click.echo(f"run {view.run_id}: {view.status}{said}{failed_after}")
    click.echo(
        f"  items {view.total}: succeeded {c.succeeded}, failed {c.failed}, cancelled {c.cancelled}"
    )
    if view.wall_time_s is not None:
        resumed = ""
        if view.resumed and view.last_part_s is not None:
            resumed = f" (since the last resume {view.last_part_s:.1f} s)"
        click.echo(f"  wall time {view.wall_time_s:.1f} s from the first start{resumed}")
    click.echo(
        f"  attempts {s.attempts} (429s {s.rate_limited_attempts}), "
        f"tokens in {s.input_tokens} out {s.output_tokens}, cost ${s.cost_usd:.4f}"
    )
    if s.cache_hits:
        click.echo(f"  {cache_line(s.cache_hits, s.attempts, c.succeeded)}")
    if len(view.variants) > 1:
        for line in variant_table(view):
            click.echo(f"  {line}")
    for line in view.after_run_failures:
        click.echo(f"  after-run work failed: {line}")


def cache_line(hits: int, attempts: int, succeeded: int) -> str:
    """What the response cache answered: a run that sent nothing says so."""
    answers = "answer" if hits == 1 else "answers"
    if attempts == 0:
        every = "all " if hits == succeeded else ""
        return f"nothing was sent: {every}{hits} {answers} came from the cache"
    return f"{hits} {answers} from the cache (not sent, $0)"
