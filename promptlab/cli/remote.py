"""The run commands through a server (`promptlab serve` owns the database).

Same output and exit codes as in process: the run id first, a progress line, a summary
and the run id again at the end; Ctrl-C cancels the run on the server.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from promptlab.cli.common import next_line, run_exit_code
from promptlab.server.client import ServerClient
from promptlab.server.discovery import ServerInfo

#: Seconds between polls of the run's progress.
POLL_S = 0.5
#: Seconds between progress lines when stderr is not a terminal.
PIPED_LINE_S = 5.0


def drive_remote(
    info: ServerInfo,
    submit: Callable[[ServerClient], dict[str, Any]],
    strict: bool,
    quiet: bool,
    output: Path | None = None,
) -> None:
    """Start a run on the server, watch it, summarize it, exit like `drive_run`."""
    client = ServerClient(info)
    run_id = str(submit(client)["run_id"])
    click.echo(f"run {run_id}")
    _watch(client, run_id, quiet)
    final = client.get(f"/v1/runs/{run_id}?summary=true")
    print_summary(final)
    if output is not None:
        count = download_batch_output(client, run_id, output)
        click.echo(f"  wrote {count} results to {output} (OpenAI Batch output format)")
    batch = bool(final.get("batch"))
    click.echo(next_line(run_id, final["status"], batch=batch, wrote=output is not None))
    raise SystemExit(run_exit_code(final["status"], final["failed"], strict))


def download_batch_output(client: ServerClient, run_id: str, path: Path) -> int:
    """A request-file run's results written to `path`; returns the line count."""
    client.download(f"/v1/runs/{run_id}/batch-output", path)
    with path.open("rb") as written:
        return sum(1 for _ in written)


def _watch(client: ServerClient, run_id: str, quiet: bool) -> None:
    from promptlab.cli.runs import progress_line
    from promptlab.facades.runs import RunProgress

    def on_sigint(_signum: int, _frame: FrameType | None) -> None:
        click.echo("\ncancelling on the server: in-flight requests finish", err=True)
        client.post(f"/v1/runs/{run_id}/cancel")

    previous = signal.signal(signal.SIGINT, on_sigint)
    tty = sys.stderr.isatty()
    last = 0.0
    try:
        while True:
            progress = client.get(f"/v1/runs/{run_id}")
            if not progress["active"]:
                break
            now = time.monotonic()
            if not quiet and (tty or now - last >= PIPED_LINE_S):
                last = now
                fields = {f.name for f in dataclasses.fields(RunProgress)} - {"limiters"}
                line = progress_line(RunProgress(**{k: progress[k] for k in fields}))
                click.echo(f"\r{line}\x1b[K" if tty else line, err=True, nl=not tty)
            time.sleep(POLL_S)
        if not quiet and tty:
            click.echo("", err=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def print_summary(run: dict[str, Any]) -> None:
    reason = f" ({run['reason']})" if run.get("reason") else ""
    click.echo(f"run {run['run_id']}: {run['status']}{reason}")
    click.echo(
        f"  items {run['total']}: succeeded {run['succeeded']}, failed {run['failed']}, "
        f"cancelled {run['cancelled']}"
    )
    if run.get("wall_time_s") is not None:
        click.echo(f"  wall time {run['wall_time_s']:.1f} s from the first start")
    s = run.get("summary") or {}
    if s:
        click.echo(
            f"  attempts {s['attempts']} (429s {s['rate_limited_attempts']}), "
            f"tokens in {s['input_tokens']} out {s['output_tokens']}, cost ${s['cost_usd']:.4f}"
        )


def status_lines(client: ServerClient, run_id: str | None, limit: int) -> list[str]:
    """`promptlab status` through the server: recent runs, or one run's summary."""
    if run_id is None:
        lines = []
        for run in client.get(f"/v1/runs?limit={limit}"):
            items = run["items"]
            lines.append(
                f"{run['run_id']}  {run['status']:<10} {run['name']}  "
                f"succeeded {items['succeeded']}, failed {items['failed']}, "
                f"pending {items['pending'] + items['in_flight']}"
            )
        return lines or ["no runs yet"]
    run = client.get(f"/v1/runs/{run_id}?summary=true")
    return [
        f"run {run['run_id']} ({run['name']}): {run['status']}",
        f"  items {run['total']}: succeeded {run['succeeded']}, failed {run['failed']}, "
        f"cancelled {run['cancelled']}, pending {run['pending']}, in flight {run['in_flight']}",
    ]
