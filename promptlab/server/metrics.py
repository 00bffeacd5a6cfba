"""`GET /metrics` in the Prometheus text format (the `prometheus-client` package).

Read at scrape time, so every figure is current and nothing is counted twice: runs by
state and every state transition (from the store's run events), items by state and in
flight, attempts and 429s per endpoint, request latency histograms per endpoint, each
limiter's current rate, concurrency, waiting requests and gate, and the store writer's
commit latency, rows, failed commits and spills.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from promptlab.store.monitoring import MonitoringReads
from promptlab.workbench import Workbench

#: Upper bounds (seconds) of the request latency histogram.
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
RUN_STATES = (
    "submitted", "waiting", "scheduled", "running", "paused", "completed", "failed", "cancelled"
)  # fmt: skip


class WorkbenchCollector:
    """Collects from the store and the engine on each scrape."""

    def __init__(self, wb: Workbench) -> None:
        self._wb = wb
        self._reads = MonitoringReads(wb.store)

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        snap = self._reads.snapshot(LATENCY_BUCKETS_S)
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
        scrape = GaugeMetricFamily("promptlab_scrape_seconds", "Time this scrape took")
        scrape.add_metric([], time.perf_counter() - started)
        yield scrape

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
        seen: set[str] = set()
        for progress in live:
            for state in progress.limiters:
                if state.name in seen:
                    continue
                seen.add(state.name)
                rate.add_metric([state.name], state.rpm if state.rpm is not None else float("inf"))
                concurrency.add_metric([state.name], state.concurrency)
                waiting.add_metric([state.name], state.waiting)
                gate.add_metric([state.name], 1.0 if state.gate_closed_until else 0.0)
        yield from (rate, concurrency, waiting, gate)
        yield from self._store_writes()

    def _store_writes(self) -> Iterator[Metric]:
        """The engine's batch writer: commit latency, rows, failures and spills."""
        from promptlab.engine.writer import WRITE_BUCKETS_S

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


def metrics_response(wb: Workbench) -> tuple[bytes, str]:
    """The exposition text and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkbenchCollector(wb))
    return generate_latest(registry), CONTENT_TYPE_LATEST
