"""Cross-checks in DuckDB: a run's answers row by row, its decisions and weights."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime

from promptlab.records.review import CrosscheckRecord, CrosscheckSummary, WeightRecord
from promptlab.store.connection import Store

#: Dataset rows read (and decisions written) per batch.
BATCH = 2_000

#: (row_index, decision, answer, agreement, confidence, inputs as JSON, entropy gap,
#: ambiguous)
DecisionRow = tuple[int, str, str | None, float, float | None, str, float | None, bool]
#: A row measured for a tiebreak: (row_index, agreement, chain divergence, re-inferred).
RoundRecord = tuple[int, float, float | None, bool]
#: A row's output (None: the request failed) and mean token entropy, per variant.
RowOutputs = dict[str, tuple[str | None, float | None]]


class CrosscheckStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def row_outputs(self, run_id: str) -> Iterator[list[tuple[int, RowOutputs]]]:
        """Each row's output and entropy per variant, BATCH rows at a time in row
        order; a cancelled or unsent item is missing from its row."""
        after = -1
        while True:
            with self.store.read() as cur:
                rows = cur.execute(
                    "SELECT row_index, variant, CASE WHEN status = 'succeeded' THEN "
                    "output_text END, token_entropy FROM results WHERE run_id = ? AND row_index IN "
                    "(SELECT DISTINCT row_index FROM results WHERE run_id = ? AND "
                    "row_index > ? ORDER BY row_index LIMIT ?) "
                    "AND status IN ('succeeded', 'failed') ORDER BY row_index, variant",
                    [run_id, run_id, after, BATCH],
                ).fetchall()
            if not rows:
                return
            batch: dict[int, RowOutputs] = {}
            for row_index, variant, output, entropy in rows:
                batch.setdefault(int(row_index), {})[variant] = (output, entropy)
            after = max(batch)
            yield list(batch.items())

    def clear(self, run_id: str) -> None:
        with self.store.transaction() as tx:
            tx.execute("DELETE FROM crosscheck_decisions WHERE run_id = ?", [run_id])
            tx.execute("DELETE FROM crosscheck_weights WHERE run_id = ?", [run_id])

    def put_weights(self, run_id: str, weights: Sequence[WeightRecord]) -> None:
        with self.store.transaction() as tx:
            tx.executemany(
                "INSERT INTO crosscheck_weights VALUES (?, ?, ?, ?, ?, ?)",
                [
                    [run_id, w.variant, w.validation_run_id, w.f1, w.base_weight, w.weight]
                    for w in weights
                ],
            )

    def add_decisions(self, run_id: str, rows: Sequence[DecisionRow], at: datetime) -> None:
        if rows:
            with self.store.transaction() as tx:
                tx.executemany(
                    "INSERT INTO crosscheck_decisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [[run_id, *row, at] for row in rows],
                )

    def decision(self, run_id: str, row_index: int) -> CrosscheckRecord | None:
        with self.store.read() as cur:
            row = cur.execute(
                "SELECT decision, answer, d.agreement, confidence, inputs, entropy_gap, "
                "ambiguous, r.divergence, coalesce(r.reinferred, false) "
                "FROM crosscheck_decisions d LEFT JOIN crosscheck_rounds r "
                "USING (run_id, row_index) WHERE run_id = ? AND row_index = ?",
                [run_id, row_index],
            ).fetchone()
        if row is None:
            return None
        return CrosscheckRecord(
            run_id,
            row_index,
            row[0],
            row[1],
            row[2],
            row[3],
            json.loads(row[4]),
            row[5],
            bool(row[6]),
            row[7],
            bool(row[8]),
        )

    def summary(self, run_id: str) -> CrosscheckSummary | None:
        """The run's weights and decision counts; None when it was not cross-checked."""
        with self.store.read() as cur:
            weights = cur.execute(
                "SELECT variant, validation_run_id, f1, base_weight, weight FROM "
                "crosscheck_weights WHERE run_id = ? ORDER BY variant",
                [run_id],
            ).fetchall()
            counts = cur.execute(
                "SELECT decision, count(*) FROM crosscheck_decisions WHERE run_id = ? "
                "GROUP BY 1 ORDER BY 1",
                [run_id],
            ).fetchall()
            reinferred = cur.execute(
                "SELECT count(*) FROM crosscheck_rounds WHERE run_id = ? AND reinferred",
                [run_id],
            ).fetchall()[0][0]
            tiebreak = cur.execute(
                "SELECT json_extract_string(spec, '$.crosscheck.tiebreak.model') FROM runs "
                "WHERE run_id = ?",
                [run_id],
            ).fetchall()
        if not weights:
            return None
        return CrosscheckSummary(
            run_id,
            tuple(WeightRecord(*w) for w in weights),
            {d: int(n) for d, n in counts},
            int(reinferred),
            tiebreak[0][0] if tiebreak else None,
        )

    def measured_rows(self, run_id: str) -> set[int]:
        """The rows of a run with a tiebreak already measured (a resume skips them)."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT row_index FROM crosscheck_rounds WHERE run_id = ?", [run_id]
            ).fetchall()
        return {int(r[0]) for r in rows}

    def add_round(
        self,
        run_id: str,
        rows: Sequence[RoundRecord],
        items: Sequence[tuple[str, int, int]],
        embedder: str,
        at: datetime,
    ) -> None:
        """Measured rows and the items (key, row, variant) that re-infer the doubted ones,
        in one transaction: a resume finds both or neither. The items go last in the
        plan, and the run's total grows by them."""
        self.store.reserve_items(len(items))
        with self.store.transaction() as tx:
            tx.executemany(
                "INSERT INTO crosscheck_rounds VALUES (?, ?, ?, ?, ?, ?, ?)",
                [[run_id, *row, embedder, at] for row in rows],
            )
            if not items:
                return
            last = tx.execute(
                "SELECT coalesce(max(seq), -1) FROM items WHERE run_id = ?", [run_id]
            ).fetchall()[0][0]
            tx.executemany(
                "INSERT INTO items (idempotency_key, run_id, seq, row_index, variant_index, "
                "repeat, status, attempts) VALUES (?, ?, ?, ?, ?, 0, 'pending', 0)",
                [
                    [key, run_id, last + 1 + i, row, variant]
                    for i, (key, row, variant) in enumerate(items)
                ],
            )
            tx.execute(
                "UPDATE runs SET total_items = total_items + ?, updated_at = ? WHERE run_id = ?",
                [len(items), at, run_id],
            )
