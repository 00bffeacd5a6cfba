"""Feedback events sent live, in DuckDB: the calls their traces name, the version ids
their references may be, and one insert per body that skips event ids already stored.

The checks and the wording of problems are promptlab.data.feedback_events'; this module
only runs SQL. An event's id is unique in `feedback` (migration 0024_live_gateway), so
`ON CONFLICT DO NOTHING` is what makes a send retried after a lost answer store nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from promptlab.data.feedback_events import LIVE_SOURCE, CallSeen, EventRow
from promptlab.store.connection import Store

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


class FeedbackEventTables:
    """Reads that resolve live events, and their insert."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def calls(self, traces: Iterable[str]) -> dict[str, CallSeen]:
        """The production log rows (gateway calls) of `traces`, by trace."""
        wanted = sorted(set(traces))
        if not wanted:
            return {}
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT trace, prompt_version_id, unit_id, variant FROM production_logs "
                "WHERE trace IN (SELECT unnest(?))",
                [wanted],
            ).fetchall()
        return {str(r[0]): CallSeen(str(r[1]), r[2], r[3]) for r in rows}

    def known_version_ids(self, candidates: Iterable[str]) -> set[str]:
        """Those of `candidates` that are a stored version id or a result's version id
        (as a feedback file's references are resolved)."""
        wanted = sorted(set(candidates))
        if not wanted:
            return set()
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT id FROM prompt_versions WHERE id IN (SELECT unnest($ids)) "
                "UNION SELECT DISTINCT prompt_version_id FROM results "
                "WHERE prompt_version_id IN (SELECT unnest($ids))",
                {"ids": wanted},
            ).fetchall()
        return {str(r[0]) for r in rows}

    def insert(self, rows: Sequence[EventRow], received_at: datetime) -> int:
        """Store the rows whose event id is new, in one transaction; returns how many
        (an id stored before, or earlier in `rows`, is skipped)."""
        if not rows:
            return 0
        with self.store.transaction() as tx:
            tx.register("x_events", _event_table(rows))
            try:
                stored = tx.execute(
                    "INSERT INTO feedback (idempotency_key, run_id, prompt_version_id, "
                    "variant, unit_id, kind, value, event_time, source, imported_at, "
                    "event_id, trace, score_name) "
                    "SELECT NULL, NULL, version_id, variant, unit_id, kind, value, "
                    "make_timestamp(time_us) AT TIME ZONE 'UTC', ?, ?, event_id, trace, "
                    "score_name FROM x_events ORDER BY n "
                    "ON CONFLICT DO NOTHING RETURNING event_id",
                    [LIVE_SOURCE, received_at],
                ).fetchall()
            finally:
                tx.unregister("x_events")
        return len(stored)


def _event_table(rows: Sequence[EventRow]) -> dict[str, Any]:
    def text(values: Iterable[str | None]) -> np.ndarray[Any, np.dtype[np.object_]]:
        return np.array(list(values), dtype=object)

    n = len(rows)
    return {
        "n": np.arange(n, dtype=np.int64),
        "event_id": text(r.event_id for r in rows),
        "trace": text(r.trace for r in rows),
        "version_id": text(r.version_id for r in rows),
        "variant": text(r.variant for r in rows),
        "unit_id": text(r.unit for r in rows),
        "kind": text(r.kind for r in rows),
        "score_name": text(r.name for r in rows),
        "value": np.fromiter((r.value for r in rows), np.float64, n),
        # Epoch microseconds, made a UTC timestamp in SQL: a NumPy datetime64 column
        # would be read in DuckDB's session time zone.
        "time_us": np.fromiter(((r.time - _EPOCH) // _ONE_US for r in rows), np.int64, n),
    }
