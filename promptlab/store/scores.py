"""Scores in DuckDB: a run's results read for scoring, its scores written, and summed."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from promptlab.records.scores import ScoreCounts
from promptlab.store.connection import Store

#: Results read (and scores written) per batch: a million-result run is scored in slices.
BATCH = 5_000


@dataclass(frozen=True)
class ScoredResult:
    """A finished result as a scorer reads it: its output and its dataset row."""

    key: str
    variant: str
    prompt_version_id: str
    row_index: int
    succeeded: bool
    output: str | None
    row: dict[str, Any]


ScoreRow = tuple[str, str, str, str, int, str, float | None, str, str | None]


class ScoreStore:
    """Reads and writes of the `scores` table."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def finished_results(self, run_id: str) -> Iterator[list[ScoredResult]]:
        """The run's succeeded and failed results with their rows, BATCH at a time."""
        after = -1
        while True:
            with self.store.read() as cur:
                rows = cur.execute(
                    "SELECT r.seq, r.idempotency_key, r.variant, r.prompt_version_id, "
                    "r.row_index, r.status = 'succeeded', r.output_text, rr.row_values "
                    "FROM results r JOIN run_rows rr ON rr.run_id = r.run_id "
                    "AND rr.row_index = r.row_index WHERE r.run_id = ? AND r.seq > ? "
                    "AND r.status IN ('succeeded', 'failed') ORDER BY r.seq LIMIT ?",
                    [run_id, after, BATCH],
                ).fetchall()
            if not rows:
                return
            after = rows[-1][0]
            yield [
                ScoredResult(r[1], r[2], r[3], int(r[4]), bool(r[5]), r[6], json.loads(r[7]))
                for r in rows
            ]

    def clear(self, run_id: str, scorer: str | None = None, keep: str | None = None) -> None:
        """Forget the run's scores (only `scorer`'s; those with status `keep` stay)."""
        where, args = "run_id = ?", [run_id]
        if scorer is not None:
            where, args = where + " AND scorer = ?", [*args, scorer]
        if keep is not None:
            where, args = where + " AND status <> ?", [*args, keep]
        with self.store.transaction() as tx:
            tx.execute(f"DELETE FROM scores WHERE {where}", args)

    def add_for_keys(
        self, run_id: str, scorer: str, verdicts: Sequence[tuple[str, float | None, str, str]]
    ) -> int:
        """Scores of `run_id`'s results by key (key, value, status, detail); the count
        of keys that are the run's results."""
        if not verdicts:
            return 0
        with self.store.transaction() as tx:
            tx.execute(
                "CREATE TEMP TABLE IF NOT EXISTS verdicts "
                "(k VARCHAR, value DOUBLE, status VARCHAR, detail VARCHAR)"
            )
            tx.execute("DELETE FROM verdicts")
            tx.executemany("INSERT INTO verdicts VALUES (?, ?, ?, ?)", list(verdicts))
            row = tx.execute(
                "INSERT INTO scores SELECT r.idempotency_key, r.run_id, r.variant, "
                "r.prompt_version_id, r.row_index, ?, v.value, v.status, v.detail "
                "FROM verdicts v JOIN results r ON r.idempotency_key = v.k AND r.run_id = ? "
                "RETURNING 1",
                [scorer, run_id],
            ).fetchall()
        return len(row)

    def add(self, rows: Sequence[ScoreRow]) -> None:
        """Rows of (key, run, variant, version, row, scorer, value, status, detail), in
        one short transaction (the engine's writer waits for none longer)."""
        if rows:
            with self.store.transaction() as tx:
                tx.executemany("INSERT INTO scores VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", list(rows))

    def counts(self, run_id: str | None = None) -> list[ScoreCounts]:
        """Per variant of `run_id` and scorer; without one, per prompt version across
        runs (labelled `name@semver`)."""
        if run_id is not None:
            source, key, args = "scores WHERE run_id = ?", "variant", [run_id]
        else:
            source = (
                "(SELECT s.*, coalesce(v.prompt_name || '@' || v.semver, "
                "left(s.prompt_version_id, 19)) AS version FROM scores s LEFT JOIN "
                "(SELECT DISTINCT ON (id) id, prompt_name, semver FROM prompt_versions) v "
                "ON v.id = s.prompt_version_id)"
            )
            key, args = "version", []
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {key}, scorer, count(value), coalesce(sum(value), 0), "
                "coalesce(sum(value * value), 0), count(*) FILTER (WHERE value = 1), "
                "count(*) FILTER (WHERE status = 'no_output'), "
                "count(*) FILTER (WHERE status = 'malformed'), "
                "count(*) FILTER (WHERE status = 'no_expected'), "
                "count(*) FILTER (WHERE status = 'not_judged'), "
                "coalesce(bool_and(value IN (0, 1)), true) "
                f"FROM {source} GROUP BY ALL ORDER BY 1, 2",
                args,
            ).fetchall()
        return [
            ScoreCounts(
                r[0],
                r[1],
                int(r[2]),
                float(r[3]),
                float(r[4]),
                int(r[5]),
                int(r[6]),
                int(r[7]),
                int(r[8]),
                int(r[9]),
                bool(r[10]),
            )
            for r in rows
        ]
