"""The Celery app: one task, `promptlab.send_chunk`, and how workers take it.

Tasks are acknowledged late and given back when their worker is lost, so a killed
worker's chunks are delivered again; claims make that second delivery send only
what was not answered. Answers do not go through Celery's result backend: each is
pushed to the owner's own list the moment it is known (promptlab/distributed/sender.py).
A task is signed by its owner and checked by the worker (promptlab/distributed/trust.py):
one that does not verify is acknowledged and dropped, never retried.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

from celery import Celery

from promptlab.distributed import settings
from promptlab.distributed.transport import TRANSPORT

#: The task's name on the wire (owners send it by name: they never import a worker).
SEND_CHUNK = "promptlab.send_chunk"
#: Times a failed chunk is tried again before its owner's timeouts take over.
CHUNK_RETRIES = 5

_sender_lock = threading.Lock()
_sender: Any = None


def make_app(url: str | None = None) -> Celery:
    url = url or settings.broker_url()
    app = Celery("promptlab", broker=url, set_as_current=False)
    if urlsplit(url).scheme == "redis":
        # kombu's Redis transport, but a worker that lost Redis with tasks in flight
        # reconnects instead of stopping (see promptlab/distributed/transport.py).
        app.conf.broker_transport = TRANSPORT
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        task_default_queue=settings.DEFAULT_QUEUE,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_transport_options=_transport_options(settings.visibility_timeout_s()),
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    app.task(name=SEND_CHUNK, bind=True)(_send_chunk)
    return app


def _transport_options(visibility_timeout_s: int) -> dict[str, int]:
    """Unacknowledged tasks older than the visibility timeout go back to the queue; the
    sweep that finds them runs every third of it (kombu's default: every 100 s)."""
    return {
        "visibility_timeout": visibility_timeout_s,
        "unacked_restore_interval": max(1, visibility_timeout_s // 3),
        "unacked_restore_throttle": 1,
    }


def _send_chunk(task: Any, *args: Any, **kwargs: Any) -> dict[str, int]:
    """Send a chunk's tickets (each once across the cluster) and answer each to its owner.
    A chunk that fails on its way (Redis unreachable a moment) is tried again shortly:
    what it already answered is not sent twice. Any arguments are taken, so a task of
    any shape reaches the signature check (and is refused there) instead of failing."""
    try:
        return _process_sender(task.app.conf.broker_url).run_task(list(args), kwargs)
    except Exception as exc:
        raise task.retry(exc=exc, countdown=1, max_retries=CHUNK_RETRIES) from exc


def _process_sender(url: str) -> Any:
    """The worker process's one Sender (its loop, providers and Redis connections)."""
    global _sender
    with _sender_lock:
        if _sender is None:
            from promptlab.distributed import worker_metrics
            from promptlab.distributed.sender import Sender

            _sender = Sender(url, metrics=worker_metrics.PROCESS)
        return _sender


def open_process_sender(url: str) -> None:
    """Make the process's Sender now (a worker at start): its heartbeat puts the worker on
    the roster while it waits for its first task (distributed/fleet.py)."""
    _process_sender(url)


def close_process_sender() -> None:
    """Stop the process's Sender: its heartbeat ends and it leaves the roster (a worker
    stopped on purpose is not counted as lost)."""
    global _sender
    with _sender_lock:
        sender, _sender = _sender, None
    if sender is not None:
        sender.close()
