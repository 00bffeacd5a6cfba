"""`GET /metrics` in the Prometheus text format (the `prometheus-client` package).

Read at scrape time, so every figure is current and nothing is counted twice: runs by
state and every state transition (from the store's run events), items by state and in
flight, attempts and 429s per endpoint, request latency histograms per endpoint, each
limiter's current rate, concurrency, waiting requests and gate, and the store writer's
commit latency, rows, failed commits and spills. With `serve --gateway-relay`, the
gateway processes' records stored, refused and trimmed, and those waiting in Redis.

Label values are bounded: an `endpoint` label is the name of a configured endpoint
(built in, or in the providers file) that passes LABEL_VALUE, never a name a run spec
chose. Every spec-declared endpoint's attempts and latency count under one value,
SPEC_DECLARED; a run's cap on a configured endpoint (its spec's `limits:`) shows under
that endpoint's name, and a running run's own endpoints and caps as one
`promptlab_run_cap{run}` series (their concurrency, summed), gone when the run ends.
So a spec declaring two hundred endpoints, or names with newlines or e-mail addresses
in them, adds no series that outlive its run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from promptlab.distributed.settings import DEFAULT_QUEUE
from promptlab.providers.config import load_endpoints
from promptlab.store.monitoring import MonitoringReads, MonitoringSnapshot
from promptlab.workbench import Workbench

if TYPE_CHECKING:
    from promptlab.server.gateway_relay import GatewayRelay

#: Upper bounds (seconds) of the request latency histogram.
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: What an `endpoint` label value may be; a configured name outside it is INVALID_NAME.
LABEL_VALUE = re.compile(r"[A-Za-z0-9_.:@+-]{1,64}")
#: The one `endpoint` value of every endpoint a run spec declared.
SPEC_DECLARED = "spec-declared"
#: How the engine names a run's cap on an endpoint (engine/send/limiter.py).
RUN_CAP_SUFFIX = " (run cap)"
INVALID_NAME = "invalid-name"
#: The owner's view of the workers (distributed/fleet.py): name and help of each gauge.
FLEET_GAUGES = (
    ("promptlab_worker_broker_up", "1 while the workers' broker answers"),
    ("promptlab_workers_alive", "Workers whose heartbeat is live"),
    ("promptlab_workers_lost", "Workers whose heartbeat stopped without a goodbye (last hour)"),
)
#: The one `queue` value of a worker queue no configured endpoint names.
OTHER_QUEUE = "other"
RUN_STATES = (
    "submitted",
    "waiting",
    "scheduled",
    "running",
    "paused",
    "completed",
    "failed",
    "cancelled",
)


#: A rollout decision's `action` label: the rule's and a person's (a fixed set).
ROLLOUT_ACTIONS = ("advance", "hold", "kill", "complete", "pause", "resume", "abort")


class WorkbenchCollector:
    """Collects from the store and the engine on each scrape."""

    def __init__(self, wb: Workbench, relay: GatewayRelay | None = None) -> None:
        self._wb = wb
        self._relay = relay
        self._reads = MonitoringReads(wb.store)
        endpoints = load_endpoints(wb.settings.providers_file)
        self._configured = set(endpoints)
        #: The worker queues of configured endpoints whose calls go through workers.
        self._queues = {
            cfg.queue or DEFAULT_QUEUE for cfg in endpoints.values() if cfg.executor == "celery"
        }

    def label(self, endpoint: str) -> str:
        """The `endpoint` label value of an endpoint's name (see the module's doc)."""
        if endpoint not in self._configured:
            return SPEC_DECLARED
        return endpoint if LABEL_VALUE.fullmatch(endpoint) else INVALID_NAME

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        snap = bounded(self._reads.snapshot(LATENCY_BUCKETS_S), self.label)
        runs = GaugeMetricFamily("promptlab_runs", "Runs by state", labels=["state"])
        moves = CounterMetricFamily(
            "promptlab_run_transitions", "Run state transitions", labels=["state"]
        )
        for state in sorted(set(RUN_STATES) | set(snap.runs_by_status) | set(snap.transitions)):
            runs.add_metric([state], snap.runs_by_status.get(state, 0))
            moves.add_metric([state], snap.transitions.get(state, 0))
        yield runs
        yield moves
        items = GaugeMetricFamily("promptlab_items", "Items by state", labels=["state"])
        for state, count in sorted(snap.items_by_status.items()):
            items.add_metric([state], count)
        yield items
        attempts = CounterMetricFamily(
            "promptlab_attempts", "Attempts by endpoint and outcome", labels=["endpoint", "kind"]
        )
        throttles = CounterMetricFamily(
            "promptlab_throttled_attempts", "429/529 answers by endpoint", labels=["endpoint"]
        )
        throttled: dict[str, int] = {}
        for (endpoint, kind), count in sorted(snap.attempts.items()):
            attempts.add_metric([endpoint, kind], count)
            if kind in ("rate_limit", "overloaded"):
                throttled[endpoint] = throttled.get(endpoint, 0) + count
        for endpoint in sorted({e for e, _k in snap.attempts}):
            throttles.add_metric([endpoint], throttled.get(endpoint, 0))
        yield attempts
        yield throttles
        latency = HistogramMetricFamily(
            "promptlab_request_latency_seconds", "Provider request latency", labels=["endpoint"]
        )
        for endpoint, cumulative in sorted(snap.latency_buckets.items()):
            buckets = [(str(b), c) for b, c in zip(LATENCY_BUCKETS_S, cumulative, strict=True)]
            buckets.append(("+Inf", snap.latency_count[endpoint]))
            latency.add_metric([endpoint], buckets, snap.latency_sum_s[endpoint])
        yield latency
        yield from self._live()
        yield self._rollouts()
        yield from self._workers()
        if self._relay is not None:
            yield from relay_metrics(self._relay)
        scrape = GaugeMetricFamily("promptlab_scrape_seconds", "Time this scrape took")
        scrape.add_metric([], time.perf_counter() - started)
        yield scrape

    def _rollouts(self) -> Metric:
        """Guarded rollouts' decisions by action: every action a series, 0 until taken."""
        decisions = CounterMetricFamily(
            "promptlab_rollout_decisions",
            "Guarded rollouts' decisions (advance, hold, kill, complete; pause, resume, abort)",
            labels=["action"],
        )
        taken = self._reads.rollout_decisions()
        for action in ROLLOUT_ACTIONS:
            decisions.add_metric([action], taken.get(action, 0))
        return decisions

    def _workers(self) -> Iterator[Metric]:
        """The workers as this owner sees them (distributed/fleet.py): only where calls go
        through workers (a configured endpoint's, or a run's): no broker asked otherwise."""
        waiting = self._wb.engine.chunks_waiting()
        if not self._queues and waiting is None:
            return
        from promptlab.distributed.fleet import fleet_snapshot
        from promptlab.distributed.settings import broker_url

        queues = self._queues | {DEFAULT_QUEUE}
        fleet = fleet_snapshot(broker_url(), queues)
        values = (fleet.broker_up, fleet.alive, fleet.lost)
        for (name, text), value in zip(FLEET_GAUGES, values, strict=True):
            gauge = GaugeMetricFamily(name, text)
            gauge.add_metric([], float(value))
            yield gauge
        depth = GaugeMetricFamily(
            "promptlab_worker_queue_depth", "Chunks waiting in a worker queue", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "promptlab_worker_queue_oldest_seconds",
            "Age of this owner's oldest chunk no worker has answered yet",
            labels=["queue"],
        )
        ages: dict[str, float] = {}
        for queue, age in (waiting or {}).items():
            name = queue if queue in queues else OTHER_QUEUE
            ages[name] = max(ages.get(name, 0.0), age)
        for queue in sorted(queues | set(ages)):
            if queue in fleet.depths:
                depth.add_metric([queue], fleet.depths[queue])
            oldest.add_metric([queue], ages.get(queue, 0.0))
        yield depth
        yield oldest

    def _live(self) -> Iterator[Metric]:
        """The engine's figures: items in flight and queued, each limiter's state."""
        in_flight = GaugeMetricFamily("promptlab_items_in_flight", "Requests being sent")
        queued = GaugeMetricFamily("promptlab_items_queued", "Items of active runs not sent yet")
        active = self._wb.runs.list(50)
        live = [self._wb.runs.progress(r.run.run_id) for r in active if r.run.status == "running"]
        in_flight.add_metric([], sum(p.in_flight for p in live))
        queued.add_metric([], sum(p.pending for p in live))
        yield in_flight
        yield queued
        rate = GaugeMetricFamily(
            "promptlab_limiter_rpm", "Current requests-per-minute target", labels=["endpoint"]
        )
        concurrency = GaugeMetricFamily(
            "promptlab_limiter_concurrency", "Current concurrency cap", labels=["endpoint"]
        )
        waiting = GaugeMetricFamily(
            "promptlab_limiter_waiting", "Requests waiting for the limiter", labels=["endpoint"]
        )
        gate = GaugeMetricFamily(
            "promptlab_limiter_gate_closed", "1 while a 429 holds the gate", labels=["endpoint"]
        )
        run_cap = GaugeMetricFamily(
            "promptlab_run_cap",
            "Concurrency of a running run's own endpoints and caps",
            labels=["run"],
        )
        seen: set[str] = set()
        for progress in live:
            own = 0
            for state in progress.limiters:
                # A run's cap on a configured endpoint is that endpoint as the run sees
                # it; a spec-declared endpoint is the run's alone.
                base = state.name.removesuffix(RUN_CAP_SUFFIX)
                name = self.label(base)
                if name == SPEC_DECLARED or base != state.name:
                    own += state.concurrency
                if name == SPEC_DECLARED or name in seen:
                    continue
                seen.add(name)
                rate.add_metric([name], state.rpm if state.rpm is not None else float("inf"))
                concurrency.add_metric([name], state.concurrency)
                waiting.add_metric([name], state.waiting)
                gate.add_metric([name], 1.0 if state.gate_closed_until else 0.0)
            if own and LABEL_VALUE.fullmatch(progress.run_id):
                run_cap.add_metric([progress.run_id], own)
        yield from (rate, concurrency, waiting, gate, run_cap)
        yield from self._store_writes()

    def _store_writes(self) -> Iterator[Metric]:
        """The engine's batch writer: commit latency, rows, failures and spills."""
        from promptlab.engine.record.writer import WRITE_BUCKETS_S

        stats = self._wb.engine.writer_stats()
        latency = HistogramMetricFamily(
            "promptlab_store_write_seconds", "Time to commit one batch of rows"
        )
        cumulative, buckets = 0, []
        for bound, count in zip(WRITE_BUCKETS_S, stats.bucket_counts, strict=False):
            cumulative += count
            buckets.append((str(bound), cumulative))
        buckets.append(("+Inf", stats.commits))
        latency.add_metric([], buckets, stats.commit_seconds)
        yield latency
        for name, value, text in (
            ("promptlab_store_rows", stats.rows, "Rows committed by the writer"),
            ("promptlab_store_failed_writes", stats.failed_commits, "Batch commits that failed"),
            ("promptlab_store_spills", stats.spills, "Batches set aside in a spill file"),
            ("promptlab_store_spilled_rows", stats.spilled_rows, "Rows set aside in spill files"),
        ):
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], value)
            yield counter


def bounded(snap: MonitoringSnapshot, label: Callable[[str], str]) -> MonitoringSnapshot:
    """`snap` with its per-endpoint figures summed under each endpoint's label value."""
    attempts: dict[tuple[str, str], int] = {}
    for (endpoint, kind), count in snap.attempts.items():
        key = (label(endpoint), kind)
        attempts[key] = attempts.get(key, 0) + count
    return MonitoringSnapshot(
        runs_by_status=snap.runs_by_status,
        transitions=snap.transitions,
        items_by_status=snap.items_by_status,
        attempts=attempts,
        latency_buckets=_summed_lists(snap.latency_buckets.items(), label),
        latency_sum_s=_summed(snap.latency_sum_s.items(), label),
        latency_count=_summed(snap.latency_count.items(), label),
    )


def _summed(pairs: Iterable[tuple[str, float]], label: Callable[[str], str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for endpoint, value in pairs:
        out[label(endpoint)] = out.get(label(endpoint), 0) + value
    return out


def _summed_lists(
    pairs: Iterable[tuple[str, list[int]]], label: Callable[[str], str]
) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for endpoint, counts in pairs:
        before = out.get(label(endpoint), [0] * len(counts))
        out[label(endpoint)] = [a + b for a, b in zip(before, counts, strict=True)]
    return out


def relay_metrics(relay: GatewayRelay) -> Iterator[Metric]:
    """`serve --gateway-relay`: the gateways' records as this owner takes them."""
    taker = relay.taker
    records = CounterMetricFamily(
        "promptlab_gateway_records",
        "Gateway processes' records taken: stored, refused (not verified, or refused by "
        "the store) or trimmed (gone from Redis before they were read)",
        labels=["outcome"],
    )
    for outcome, count in (
        ("stored", taker.stored),
        ("refused", taker.refused),
        ("trimmed", taker.trimmed),
    ):
        records.add_metric([outcome], count)
    yield records
    waiting = relay.waiting()
    up = GaugeMetricFamily("promptlab_gateway_relay_up", "1 while the relay's broker answers")
    up.add_metric([], 0 if waiting is None else 1)
    yield up
    if waiting is not None:
        left = GaugeMetricFamily(
            "promptlab_gateway_records_waiting", "Gateway records in Redis not stored yet"
        )
        left.add_metric([], waiting)
        yield left


def metrics_response(wb: Workbench, relay: GatewayRelay | None = None) -> tuple[bytes, str]:
    """The exposition text and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkbenchCollector(wb, relay))
    return generate_latest(registry), CONTENT_TYPE_LATEST
