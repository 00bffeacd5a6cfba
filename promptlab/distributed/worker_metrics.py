"""A worker's own figures, served on its `/metrics` port for Prometheus to scrape, and
the lines it says about its work (each naming its run and item: `as_ticket`).

`promptlab worker --metrics-port PORT --metrics-token-file FILE` serves them (on
127.0.0.1 unless `--metrics-address` says otherwise): tasks received (accepted or
refused), tickets by outcome (sent and answered, failed, reused: another delivery's
answer handed on, refused), sends in flight, the provider's send latency, and the time
of the last heartbeat the worker wrote to Redis. A scrape must carry the token from the
file as `Authorization: Bearer TOKEN` (Prometheus: `authorization: {credentials_file:
FILE}`); a worker has no token store of its own, so the file is its one principal, and
a refused scrape is logged once per address.

The owner's side of the picture (queue depth, its oldest chunk no worker has answered,
workers alive and lost) is on `promptlab serve`'s `/metrics` (promptlab/distributed/
fleet.py). Label values are bounded: an `endpoint` is a name from this worker's own
providers file, every other endpoint a task names counts as `other`.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
from collections.abc import Awaitable
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from promptlab.audit.logjson import bind_log_context
from promptlab.errors import ConfigError
from promptlab.providers.base import CompletionRequest

log = logging.getLogger(__name__)

#: Upper bounds (seconds) of the send latency histogram (the owner's request latency's).
SEND_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: What an `endpoint` label value may be (the owner's rule, server/metrics.py).
LABEL_VALUE = re.compile(r"[A-Za-z0-9_.:@+-]{1,64}")
#: The one `endpoint` value of an endpoint this worker's providers file does not name.
OTHER = "other"
#: Outcomes of a ticket (a request of a chunk) on this worker.
TICKET_OUTCOMES = ("sent", "failed", "reused", "refused", "late")
#: Bytes of the token file read at most (a token is one line).
MAX_TOKEN_BYTES = 4096


class WorkerMetrics:
    """The counters one worker process keeps; `registry` is what its port serves."""

    def __init__(self, configured: set[str] | frozenset[str] = frozenset()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._configured = set(configured)
        self.tasks = Counter(
            "promptlab_worker_tasks",
            "Tasks (chunks) this worker received, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.tickets = Counter(
            "promptlab_worker_tickets",
            "Requests of chunks by outcome: sent (answered by the provider), failed "
            "(an error answer), reused (another delivery's answer), refused, late (not sent: "
            "its owner had stopped waiting)",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "promptlab_worker_in_flight",
            "Requests this worker is sending now",
            ["endpoint"],
            registry=self.registry,
        )
        self.send_seconds = Histogram(
            "promptlab_worker_send_seconds",
            "Time of one call to the provider, on this worker",
            ["endpoint"],
            buckets=SEND_BUCKETS_S,
            registry=self.registry,
        )
        self.heartbeat = Gauge(
            "promptlab_worker_heartbeat_timestamp_seconds",
            "When this worker last wrote its heartbeat to Redis (Unix time)",
            registry=self.registry,
        )
        for outcome in ("accepted", "refused"):
            self.tasks.labels(outcome).inc(0)

    def label(self, endpoint: str) -> str:
        """The `endpoint` label value of an endpoint's name (see the module's doc)."""
        if endpoint in self._configured and LABEL_VALUE.fullmatch(endpoint):
            return endpoint
        return OTHER

    def ticket(self, endpoint: str, outcome: str, count: int = 1) -> None:
        if count:
            self.tickets.labels(self.label(endpoint), outcome).inc(count)


#: The worker process's metrics, set by `promptlab worker` before its first task (the
#: process's one Sender counts into them; distributed/app.py). None elsewhere: a Sender
#: made in a test or an owner keeps counters of its own.
PROCESS: WorkerMetrics | None = None


async def as_ticket(work: Awaitable[bool], run_id: str | None, request: CompletionRequest) -> bool:
    """One ticket's work, its log lines naming its run and item (its own task's context:
    asyncio.gather gives each its own)."""
    bind_log_context(run_id=run_id, item_key=request.item_key)
    return await work


def said_chunk(runs: list[str | None], size: int, sent: int, endpoint: str) -> None:
    """One INFO line a chunk: for whom, how many sent, how many were answered already."""
    named = sorted({r for r in runs if r is not None})
    log.info(
        "chunk of %d for %s: %d sent, %d answered already",
        size,
        endpoint,
        sent,
        size - sent,
        extra={"run_id": named[0]} if len(named) == 1 else {"runs": named},
    )


def read_token(path: Path) -> str:
    """The scrape token in `path` (its first line); ConfigError naming the file when it
    cannot be read or holds none."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"--metrics-token-file {path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_TOKEN_BYTES:
        raise ConfigError(f"--metrics-token-file {path}: over {MAX_TOKEN_BYTES} bytes")
    lines = raw.decode("utf-8", errors="replace").splitlines()
    token = lines[0].strip() if lines else ""
    if len(token) < 16:
        raise ConfigError(
            f"--metrics-token-file {path}: its first line must hold a token of 16 "
            "characters or more"
        )
    return token


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        return None


class MetricsServer:
    """`registry` served on address:port to callers with the bearer token."""

    def __init__(self, registry: CollectorRegistry, address: str, port: int, token: str) -> None:
        self._app = make_wsgi_app(registry)
        self._expected = f"Bearer {token}".encode()
        self._refused_from: set[str] = set()
        try:
            self._httpd = make_server(address, port, self._guarded, _Server, handler_class=_Quiet)
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port: cannot listen on {address}:{port}: {exc.strerror or exc}"
            ) from exc
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, daemon=True, name="worker-metrics"
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _guarded(self, environ: dict[str, Any], start_response: Any) -> Any:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"only /metrics is served here\n"]
        if not hmac.compare_digest(given, self._expected):
            peer = str(environ.get("REMOTE_ADDR"))
            if peer not in self._refused_from and len(self._refused_from) < 100:
                self._refused_from.add(peer)
                log.warning("worker metrics: refused a scrape from %s without the token", peer)
            start_response("401 Unauthorized", [("WWW-Authenticate", "Bearer")])
            return [b"a scrape needs the token of --metrics-token-file\n"]
        return self._app(environ, start_response)
