"""`promptlab worker`: a Celery worker that sends runs' requests (promptlab/distributed)."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from promptlab.audit.logjson import celery_logging, celery_said, json_logs_asked, say
from promptlab.cli.common import handle_errors
from promptlab.distributed.settings import DEFAULT_QUEUE


@click.command("worker")
@click.option(
    "--concurrency",
    type=click.IntRange(1, 512),
    default=64,
    show_default=True,
    help="Chunks in flight at once (threads, which only wait: the requests of "
    "every chunk go out together on one event loop).",
)
@click.option(
    "--queues",
    default=DEFAULT_QUEUE,
    show_default=True,
    help="Comma-separated queues to take chunks from.",
)
@click.option(
    "--loglevel",
    default="warning",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve this worker's metrics for Prometheus on PORT (/metrics; 0: a free "
    "port, named in the log). Needs --metrics-token-file.",
)
@click.option(
    "--metrics-address",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port listens on.",
)
@click.option(
    "--metrics-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File whose first line is the token a scrape must send (Authorization: Bearer TOKEN).",
)
@handle_errors
def worker_command(
    concurrency: int,
    queues: str,
    loglevel: str,
    metrics_port: int | None,
    metrics_address: str,
    metrics_token_file: Path | None,
) -> None:
    """Send the requests of runs whose endpoints execute on workers (`executor: celery`).

    The broker is PROMPTLAB_BROKER_URL (default redis://127.0.0.1:6379/0). Endpoints and
    keys are this worker's own: a task names an endpoint, and the worker sends only to
    the one its providers file (PROMPTLAB_PROVIDERS) configures alike, with the key from
    its own environment; a keyless endpoint on loopback is the one exception. Tasks must
    be signed with PROMPTLAB_WORKER_SECRET (required, on owners and workers alike, when
    the broker is not on loopback; else a per-user secret file is used). Every worker on
    the same broker shares one rate budget per endpoint and key; a killed worker's
    chunks are delivered again, and what it already answered is not sent twice. With
    --metrics-port it serves its tasks, tickets, sends in flight, send latency and
    heartbeat for Prometheus (docs/how-to/observability.md).
    """
    from promptlab.config import Settings
    from promptlab.distributed.app import make_app
    from promptlab.distributed.settings import broker_url
    from promptlab.distributed.trust import worker_secret
    from promptlab.providers.config import load_endpoints

    # Refused here, in one line, rather than task by task once it runs.
    worker_secret(broker_url())
    endpoints = load_endpoints(Settings.from_env().providers_file)
    if metrics_port is not None:
        _serve_metrics(set(endpoints), metrics_address, metrics_port, metrics_token_file)
    # promptlab's records go out once, through the CLI's redacting handler: passed on
    # to Celery's root handler too, each would be printed twice, the second unredacted.
    logging.getLogger("promptlab").propagate = False
    logging.getLogger("promptlab").setLevel(loglevel.upper())  # its chunk lines are INFO
    app = make_app()
    _on_start_and_stop(app.conf.broker_url)
    argv = [
        "worker",
        f"--concurrency={concurrency}",
        "--pool=threads",
        f"--queues={queues}",
        f"--loglevel={loglevel.upper()}",
        "--without-gossip",
        "--without-mingle",
    ]
    if json_logs_asked():  # every line JSON: no banner; Celery's logging and its
        from celery import signals  # signal handlers' lines go through ours (logjson.py)
        from celery.apps import worker as celery_worker

        celery_logging(loglevel.upper())
        signals.setup_logging.connect(celery_logging, weak=False)
        celery_worker.safe_say = celery_said
        argv.insert(0, "--quiet")
    app.worker_main(argv)


def _on_start_and_stop(url: str) -> None:
    """The sender starts with the worker (on the roster while idle) and stops with it."""
    from celery import signals

    from promptlab.distributed.app import close_process_sender, open_process_sender

    signals.worker_ready.connect(lambda **_: open_process_sender(url), weak=False)
    signals.worker_shutdown.connect(lambda **_: close_process_sender(), weak=False)


def _serve_metrics(configured: set[str], address: str, port: int, token_file: Path | None) -> None:
    """The process's metrics, served on their port before the first task comes."""
    from promptlab.distributed import worker_metrics

    if token_file is None:
        raise click.UsageError("--metrics-port needs --metrics-token-file (a scrape's token)")
    token = worker_metrics.read_token(token_file)
    worker_metrics.PROCESS = worker_metrics.WorkerMetrics(configured)
    server = worker_metrics.MetricsServer(worker_metrics.PROCESS.registry, address, port, token)
    server.start()
    say(f"worker metrics on http://{address}:{server.port}/metrics", logger="promptlab.worker")


commands: list[click.Command] = [worker_command]
