"""The review queue in DuckDB: items sent to a person, their decisions, and what a
reviewer sees of each (the row, every variant's answer and its scores)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from promptlab.records.review import ReviewAnswer, ReviewItem
from promptlab.store.connection import Store

#: (run_id, row_index, key, source, reason, proposed)
NewItem = tuple[str, int, str | None, str, str, str | None]
#: Rows read per batch when exporting decided answers.
BATCH = 2_000
_COLUMNS = (
    "id, run_id, row_index, idempotency_key, source, reason, proposed, status, answer, "
    "note, created_by, created_at, decided_by, decided_at, version, changed_by, changed_at"
)
#: Results that did not pass their checks: a schema failure or a rule broken.
_FAILED_CHECKS = "(check_status IN ('invalid', 'truncated') OR rule_status = 'failed')"


class ReviewStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def add(self, items: Sequence[NewItem], by: str, at: datetime) -> list[int]:
        """Open an item per (run, row) not yet in the queue; the ids of those opened."""
        ids: list[int] = []
        with self.store.transaction() as tx:
            for item in items:
                row = tx.execute(
                    f"INSERT INTO review_items ({_COLUMNS}) VALUES (nextval('review_ids'), "
                    "?, ?, ?, ?, ?, ?, 'open', NULL, NULL, ?, ?, NULL, NULL, 0, NULL, NULL) "
                    "ON CONFLICT DO NOTHING RETURNING id",
                    [*item, by, at],
                ).fetchone()
                if row is not None:
                    ids.append(int(row[0]))
        return ids

    def clear_open(self, run_id: str, source: str) -> None:
        """Drop the run's open items from `source` (decided ones stay)."""
        with self.store.transaction() as tx:
            tx.execute(
                "DELETE FROM review_items WHERE run_id = ? AND source = ? AND status = 'open'",
                [run_id, source],
            )

    def items(
        self, status: str | None = None, run_id: str | None = None, limit: int = 200
    ) -> list[ReviewItem]:
        where: list[str] = ["true"]
        args: list[Any] = []
        if status is not None:
            where, args = [*where, "status = ?"], [*args, status]
        if run_id is not None:
            where, args = [*where, "run_id = ?"], [*args, run_id]
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM review_items WHERE {' AND '.join(where)} "
                "ORDER BY id LIMIT ?",
                [*args, limit],
            ).fetchall()
        return [ReviewItem(*r) for r in rows]

    def counts(self, run_id: str | None = None) -> dict[str, int]:
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT status, count(*) FROM review_items WHERE ? IS NULL OR run_id = ? "
                "GROUP BY 1",
                [run_id, run_id],
            ).fetchall()
        return {status: int(n) for status, n in rows}

    def get(self, item_id: int) -> ReviewItem | None:
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_COLUMNS} FROM review_items WHERE id = ?", [item_id]
            ).fetchone()
        return ReviewItem(*row) if row is not None else None

    def decide(
        self,
        item_id: int,
        version: int,
        status: str,
        answer: str | None,
        note: str | None,
        by: str,
        at: datetime,
    ) -> bool:
        """Settle the item if it is open and still at `version` (one statement: two
        deciders cannot both pass); whether it was settled."""
        with self.store.transaction() as tx:
            row = tx.execute(
                "UPDATE review_items SET status = ?, answer = ?, note = ?, decided_by = ?, "
                "decided_at = ?, version = version + 1, changed_by = ?, changed_at = ? "
                "WHERE id = ? AND version = ? AND status = 'open' RETURNING id",
                [status, answer, note, by, at, by, at, item_id, version],
            ).fetchone()
        return row is not None

    def reopen(self, item_id: int, version: int, by: str, at: datetime) -> bool:
        """Open a settled item again, its decision cleared (the audit trail keeps it), if
        it is still at `version`; whether it was reopened."""
        with self.store.transaction() as tx:
            row = tx.execute(
                "UPDATE review_items SET status = 'open', answer = NULL, note = NULL, "
                "decided_by = NULL, decided_at = NULL, version = version + 1, "
                "changed_by = ?, changed_at = ? "
                "WHERE id = ? AND version = ? AND status <> 'open' RETURNING id",
                [by, at, item_id, version],
            ).fetchone()
        return row is not None

    def row_values(self, run_id: str, row_index: int) -> dict[str, Any] | None:
        with self.store.read() as cur:
            row = cur.execute(
                "SELECT row_values FROM run_rows WHERE run_id = ? AND row_index = ?",
                [run_id, row_index],
            ).fetchone()
        return json.loads(row[0]) if row is not None else None

    def answers(self, run_id: str, row_index: int) -> list[ReviewAnswer]:
        """Every final result of the row (each variant, each repeat) with its scores."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT idempotency_key, variant, model, status, check_status, output_text, "
                "error_message FROM results WHERE run_id = ? AND row_index = ? "
                "ORDER BY variant, repeat",
                [run_id, row_index],
            ).fetchall()
            scores = cur.execute(
                "SELECT idempotency_key, scorer, value FROM scores WHERE run_id = ? "
                "AND row_index = ? ORDER BY scorer",
                [run_id, row_index],
            ).fetchall()
        by_key: dict[str, dict[str, float | None]] = {}
        for key, scorer, value in scores:
            by_key.setdefault(key, {})[scorer] = value
        return [
            ReviewAnswer(r[0], r[1], r[2], r[3], r[4], r[5], r[6], by_key.get(r[0], {}))
            for r in rows
        ]

    def failed_checks(self, run_id: str, limit: int) -> list[tuple[int, str, str | None]]:
        """(row, key, output) of the run's results that failed their checks."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT row_index, idempotency_key, output_text FROM results WHERE run_id = ? "
                f"AND {_FAILED_CHECKS} ORDER BY seq LIMIT ?",
                [run_id, limit],
            ).fetchall()
        return [(int(r[0]), r[1], r[2]) for r in rows]

    def alerted(self, run_id: str, limit: int) -> list[tuple[int, str, str | None, str]]:
        """(row, key, output, alert) of results inside an anomaly alert's span that did
        not complete (failed, or failed their checks): what the alert was about."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT r.row_index, r.idempotency_key, r.output_text, "
                "min(a.kind || ': ' || a.message) FROM results r JOIN alerts a "
                "ON a.run_id = r.run_id AND a.variant = r.variant "
                "AND r.seq BETWEEN a.first_seq AND a.last_seq WHERE r.run_id = ? AND "
                f"(r.status = 'failed' OR {_FAILED_CHECKS}) GROUP BY ALL ORDER BY 1 LIMIT ?",
                [run_id, limit],
            ).fetchall()
        return [(int(r[0]), r[1], r[2], r[3]) for r in rows]

    def decided(self, run_id: str | None = None) -> Iterator[list[tuple[dict[str, Any], str]]]:
        """(dataset row, settled answer) of accepted and corrected items, in batches."""
        after = 0
        while True:
            with self.store.read() as cur:
                rows = cur.execute(
                    "SELECT i.id, rr.row_values, i.answer FROM review_items i JOIN run_rows rr "
                    "ON rr.run_id = i.run_id AND rr.row_index = i.row_index "
                    "WHERE i.status IN ('accepted', 'corrected') AND i.answer IS NOT NULL "
                    "AND i.id > ? AND (? IS NULL OR i.run_id = ?) ORDER BY i.id LIMIT ?",
                    [after, run_id, run_id, BATCH],
                ).fetchall()
            if not rows:
                return
            after = int(rows[-1][0])
            yield [(json.loads(r[1]), r[2]) for r in rows]
