"""Anomaly alerts of runs: the `alerts` table, and the result stream the detectors read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from promptlab.records import AlertRecord
from promptlab.store.connection import Store

_COLUMNS = "run_id, variant, kind, message, first_seq, last_seq, raised_at"


class AlertStore:
    """Writes and reads of the `alerts` table."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def add(self, alerts: Sequence[AlertRecord]) -> None:
        """Append alerts (the engine's live ones, a few per run at most)."""
        if not alerts:
            return
        with self.store.transaction() as tx:
            tx.executemany(
                f"INSERT INTO alerts ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [_values(a) for a in alerts],
            )

    def replace(self, run_id: str, alerts: Sequence[AlertRecord]) -> None:
        """The run's alerts become exactly `alerts` (an after-run pass run again)."""
        with self.store.transaction() as tx:
            tx.execute("DELETE FROM alerts WHERE run_id = ?", [run_id])
            if alerts:
                tx.executemany(
                    f"INSERT INTO alerts ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [_values(a) for a in alerts],
                )

    def for_run(self, run_id: str) -> list[AlertRecord]:
        """The run's alerts in the order of the items they start at."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM alerts WHERE run_id = ? "
                "ORDER BY first_seq, last_seq, kind, variant",
                [run_id],
            ).fetchall()
        return [AlertRecord(*row) for row in rows]

    def finished_stream(self, run_id: str, batch_rows: int = 5_000) -> Iterator[tuple[Any, ...]]:
        """The run's finished (not cancelled) results in finishing order, a batch at a time:
        (seq, variant, status, error_kind, check_status, output_text)."""
        with self.store.read() as cur:
            cur.execute(
                "SELECT seq, variant, status, error_kind, check_status, output_text "
                "FROM results WHERE run_id = ? AND status <> 'cancelled' "
                "ORDER BY finished_at, seq",
                [run_id],
            )
            while rows := cur.fetchmany(batch_rows):
                yield from rows


def _values(alert: AlertRecord) -> list[Any]:
    return [
        alert.run_id,
        alert.variant,
        alert.kind,
        alert.message,
        alert.first_seq,
        alert.last_seq,
        alert.raised_at,
    ]
