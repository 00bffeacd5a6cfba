"""Completion rate and p90 latency per time bucket, from DuckDB: a run's per variant
(by finishing time), or production logs' per prompt version (by event time).

The bucket is chosen from the span of the results (or log lines) so a chart gets tens
of points, not one or a million: a run of seconds is bucketed by second, a week by day.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from promptlab.store.connection import Store
from promptlab.store.log_outcomes import outcome_ctes
from promptlab.store.metrics import MetricsReads, completed_predicate
from promptlab.store.runs import fetch_run

#: date_trunc units, finest first, with the longest span each is used for.
BUCKET_UNITS = (
    ("second", timedelta(minutes=3)),
    ("minute", timedelta(hours=3)),
    ("hour", timedelta(days=4)),
)
#: Past the last span: one bucket a day.
LONGEST_UNIT = "day"


@dataclass(frozen=True)
class TimeBucket:
    """One variant's results finished within one bucket (or one version's log lines)."""

    #: The run's variant, or the version's label (`name@semver`) for production logs.
    variant: str
    start: datetime
    #: Results finished; for logs, the lines that say whether they completed.
    finished: int
    completed: int
    #: p90 of the succeeded results' latencies (of the lines' latencies for logs); None
    #: when none succeeded.
    latency_p90_ms: float | None

    @property
    def completion_rate(self) -> float | None:
        return self.completed / self.finished if self.finished else None


@dataclass(frozen=True)
class TimeSeries:
    """A run's buckets, oldest first, variants in variant order within a bucket (for
    logs: versions in the order asked for)."""

    #: The run; empty for production logs.
    run_id: str
    #: The date_trunc unit the buckets start on (`second`, `minute`, `hour`, `day`).
    unit: str
    buckets: list[TimeBucket]


def bucket_unit(first: datetime | None, last: datetime | None) -> str:
    """The finest unit whose span limit covers `last - first`."""
    if first is None or last is None:
        return BUCKET_UNITS[0][0]
    span = last - first
    for unit, longest in BUCKET_UNITS:
        if span <= longest:
            return unit
    return LONGEST_UNIT


class TimeseriesReads:
    """Results of one run, or production log lines, grouped by variant (version) and
    time bucket."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def run_series(self, run_id: str) -> TimeSeries:
        with self.store.read() as cur:
            fetch_run(cur, run_id)
            span = cur.execute(
                "SELECT min(finished_at), max(finished_at) FROM results WHERE run_id = ?",
                [run_id],
            ).fetchone()
            unit = bucket_unit(*(span or (None, None)))
            # The metrics module owns what "complete" means; its predicate is reused.
            done = completed_predicate(MetricsReads(self.store).columns(cur))
            rows = cur.execute(
                f"SELECT variant, date_trunc('{unit}', finished_at) AS start, count(*), "
                f"count(*) FILTER (WHERE {done}), "
                "quantile_cont(latency_ms, 0.9) FILTER (WHERE status = 'succeeded') "
                "FROM results WHERE run_id = ? GROUP BY variant, start",
                [run_id],
            ).fetchall()
            order = cur.execute(
                "SELECT name FROM run_variants WHERE run_id = ? ORDER BY variant_index", [run_id]
            ).fetchall()
        rank = {r[0]: i for i, r in enumerate(order)}
        buckets = [
            TimeBucket(r[0], r[1], int(r[2]), int(r[3]), None if r[4] is None else float(r[4]))
            for r in sorted(rows, key=lambda r: (r[1], rank.get(r[0], len(rank)), r[0]))
        ]
        return TimeSeries(run_id, unit, buckets)

    def log_series(
        self, versions: Sequence[tuple[str, str]], since: datetime | None = None
    ) -> TimeSeries:
        """Production requests of `versions` ((version id, label) each) per version and
        time bucket of their event time, from `since` on: the requests whose completion
        is known, how many completed (their feedback events counted as
        promptlab/store/log_outcomes.py counts them), and the p90 of their latencies."""
        ids = [version_id for version_id, _ in versions]
        window = " AND event_time >= $since" if since is not None else ""
        where = f"list_contains($ids, prompt_version_id){window}"
        params: dict[str, Any] = {"ids": ids} | ({"since": since} if since is not None else {})
        with self.store.read() as cur:
            span = cur.execute(
                f"SELECT min(event_time), max(event_time) FROM production_logs WHERE {where}",
                params,
            )
            unit = bucket_unit(*(span.fetchone() or (None, None)))
            rows = cur.execute(
                outcome_ctes(where, where)
                + f"SELECT version, date_trunc('{unit}', event_time) AS start, "
                "count(*) FILTER (WHERE known), count(*) FILTER (WHERE done), "
                "quantile_cont(latency_ms, 0.9) FROM lines GROUP BY version, start",
                params,
            ).fetchall()
        rank = {version_id: i for i, version_id in enumerate(ids)}
        label = dict(versions)
        buckets = [
            TimeBucket(
                label[r[0]], r[1], int(r[2]), int(r[3]), None if r[4] is None else float(r[4])
            )
            for r in sorted(rows, key=lambda r: (r[1], rank[r[0]]))
        ]
        return TimeSeries("", unit, buckets)
