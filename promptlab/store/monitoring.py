"""What `/metrics` reads from the store: runs by state, transitions, attempts per endpoint.

Each figure is an aggregate the database computes in one pass (milliseconds at a
million attempts); the live ones (items in flight, limiter rates) come from the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from promptlab.store.connection import Store


@dataclass(frozen=True)
class MonitoringSnapshot:
    """Counts by key; latency buckets are cumulative counts per endpoint, like Prometheus's."""

    runs_by_status: dict[str, int] = field(default_factory=dict)
    transitions: dict[str, int] = field(default_factory=dict)
    items_by_status: dict[str, int] = field(default_factory=dict)
    attempts: dict[tuple[str, str], int] = field(default_factory=dict)
    latency_buckets: dict[str, list[int]] = field(default_factory=dict)
    latency_sum_s: dict[str, float] = field(default_factory=dict)
    latency_count: dict[str, int] = field(default_factory=dict)


_ATTEMPT_JOIN = (
    "FROM attempts a JOIN items i ON i.idempotency_key = a.idempotency_key "
    "JOIN run_variants v ON v.run_id = i.run_id AND v.variant_index = i.variant_index"
)


class MonitoringReads:
    """The aggregates behind the server's `/metrics`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def rollout_decisions(self) -> dict[str, int]:
        """Guarded rollouts' decisions so far, by action (their audit events)."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT json_extract_string(payload, '$.action'), count(*) FROM audit_events "
                "WHERE kind = 'rollout.decision' GROUP BY ALL"
            ).fetchall()
        return {str(action): int(n) for action, n in rows}

    def snapshot(self, buckets_s: Sequence[float]) -> MonitoringSnapshot:
        """Every figure from one snapshot of the store; `buckets_s` are upper bounds."""
        bucket_sums = ", ".join(
            f"count(*) FILTER (WHERE a.latency_ms <= {float(b) * 1000!r})" for b in buckets_s
        )
        with self.store.read() as cur:
            runs = cur.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()
            moves = cur.execute(
                "SELECT status, count(*) FROM run_events GROUP BY status"
            ).fetchall()
            items = cur.execute("SELECT status, count(*) FROM items GROUP BY status").fetchall()
            # An attempt's endpoint is its item's variant's: through `items` (never
            # deleted), not `results` (a resume replaces failed rows), so these counters
            # only grow, and retries of items still open count at once.
            per_endpoint = cur.execute(
                f"SELECT v.endpoint, coalesce(a.error_kind, 'ok'), count(*) {_ATTEMPT_JOIN} "
                "GROUP BY ALL"
            ).fetchall()
            latency = cur.execute(
                f"SELECT v.endpoint, {bucket_sums}, sum(a.latency_ms) / 1000, count(*) "
                f"{_ATTEMPT_JOIN} WHERE a.latency_ms IS NOT NULL GROUP BY v.endpoint"
            ).fetchall()
        n = len(buckets_s)
        return MonitoringSnapshot(
            runs_by_status=dict(runs),
            transitions=dict(moves),
            items_by_status=dict(items),
            attempts={(e, kind): c for e, kind, c in per_endpoint},
            latency_buckets={row[0]: list(row[1 : n + 1]) for row in latency},
            latency_sum_s={row[0]: float(row[n + 1] or 0.0) for row in latency},
            latency_count={row[0]: int(row[n + 2]) for row in latency},
        )
