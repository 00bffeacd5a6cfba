"""The run commands through a server (`promptlab serve` owns the database).

Same output and exit codes as in process: the run id first, the live progress (the
same LiveProgress, from the run's status: the line with its limiters, a provider-batch
run's batches), a summary and the run id again at the end; Ctrl-C cancels the run on the
server. Before all that, `served` said on stderr which server it is.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import click

from promptlab.cli.common import next_line, run_exit_code
from promptlab.server.client import ServerClient
from promptlab.server.discovery import ServerInfo

#: Seconds between polls of the run's progress.
POLL_S = 0.5
#: The first short wait near a run's end (see PollPace).
END_POLL_S = 0.05


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
    from promptlab.cli.run_text import print_summary
    from promptlab.facades.run_view import RunView
    from promptlab.server.typed import from_wire

    # The run's view as `drive_run` reads it, printed by the same lines.
    view = from_wire(RunView, client.get(f"/v1/runs/{run_id}/view"))
    print_summary(view)
    if output is not None:
        count = download_batch_output(client, run_id, output)
        click.echo(f"  wrote {count} results to {output} (OpenAI Batch output format)")
    batch = bool(client.get(f"/v1/runs/{run_id}?summary=true").get("batch"))
    click.echo(next_line(run_id, view.status, batch=batch, wrote=output is not None))
    failed_after = bool(view.after_run_failures)
    raise SystemExit(run_exit_code(view.status, view.counts.failed, strict, failed_after))


def download_batch_output(client: ServerClient, run_id: str, path: Path) -> int:
    """A request-file run's results written to `path`; returns the line count."""
    client.download(f"/v1/runs/{run_id}/batch-output", path)
    with path.open("rb") as written:
        return sum(1 for _ in written)


def _watch(client: ServerClient, run_id: str, quiet: bool) -> None:
    """Follow the run on the server to its end: the same progress lines as here
    (run_text.LiveProgress), from its status (limiters and provider batches included)."""
    from promptlab.cli.run_text import LiveProgress
    from promptlab.facades.runs import RunProgress
    from promptlab.providers.batches.ledger import ChunkView
    from promptlab.server.typed import from_wire

    def on_sigint(_signum: int, _frame: FrameType | None) -> None:
        click.echo("\ncancelling on the server: in-flight requests finish", err=True)
        client.post(f"/v1/runs/{run_id}/cancel")

    previous = signal.signal(signal.SIGINT, on_sigint)
    live = LiveProgress(quiet)
    pace = PollPace()
    try:
        while True:
            progress = client.get(f"/v1/runs/{run_id}")
            if not progress["active"]:
                break
            if live.due():
                batches = from_wire(tuple[ChunkView, ...], progress.get("batches") or ())
                live.show(from_wire(RunProgress, progress), batches)
            time.sleep(pace.wait(progress))
        live.end()
    finally:
        signal.signal(signal.SIGINT, previous)


class PollPace:
    """How long to wait before polling a run's progress again.

    POLL_S while the run goes on. Near its end, less, so the end is seen soon after it
    happens rather than up to POLL_S late (the server offers no wait on a run):
    - when its ETA is under POLL_S, the wait is the ETA;
    - when nothing is pending or in flight (the run is recording its end), END_POLL_S.
    Each kind of short wait is at least twice the last of its kind, up to POLL_S: a run
    that lingers (a stall on its last items, after-run work) costs a few polls more, not
    twenty a second.
    """

    def __init__(self) -> None:
        self._due = END_POLL_S
        self._closing = END_POLL_S

    def wait(self, progress: Mapping[str, Any]) -> float:
        """Seconds to wait after `progress` (the JSON of the run's progress)."""
        if progress["total"] and not progress["pending"] and not progress["in_flight"]:
            wait, self._closing = self._closing, min(POLL_S, 2 * self._closing)
            return wait
        eta = progress.get("eta_s")
        if eta is None or eta >= POLL_S:
            return POLL_S
        wait = max(self._due, eta)
        self._due = min(POLL_S, 2 * wait)
        return wait
