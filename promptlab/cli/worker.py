"""`promptlab worker`: a Celery worker that sends runs' requests (promptlab/distributed)."""

from __future__ import annotations

import click

from promptlab.cli.common import handle_errors
from promptlab.distributed.settings import DEFAULT_QUEUE


@click.command("worker")
@click.option("--concurrency", type=click.IntRange(1, 512), default=64, show_default=True,
              help="Chunks in flight at once (threads, which only wait: the requests of "
              "every chunk go out together on one event loop).")  # fmt: skip
@click.option("--queues", default=DEFAULT_QUEUE, show_default=True,
              help="Comma-separated queues to take chunks from.")  # fmt: skip
@click.option("--loglevel", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))  # fmt: skip
@handle_errors
def worker_command(concurrency: int, queues: str, loglevel: str) -> None:
    """Send the requests of runs whose endpoints execute on workers (`executor: celery`).

    The broker is PROMPTLAB_BROKER_URL (default redis://127.0.0.1:6379/0). Keys come from
    this worker's own environment (the variable each endpoint names): a run carries none.
    Every worker on the same broker shares one rate budget per endpoint and key; a
    killed worker's chunks are delivered again, and what it already answered is not sent
    twice. Start as many as you like, on any machine that reaches the broker.
    """
    from promptlab.distributed.app import make_app

    app = make_app()
    app.worker_main(
        [
            "worker", f"--concurrency={concurrency}", "--pool=threads", f"--queues={queues}",
            f"--loglevel={loglevel.upper()}", "--without-gossip", "--without-mingle",
        ]
    )  # fmt: skip


commands: list[click.Command] = [worker_command]
