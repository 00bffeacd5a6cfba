"""What the pages and the CLI read about runs: typed query results, computed in DuckDB.

Counts come from `items` (every planned item, open ones included); usage, cost and
latency from `results`, where only succeeded rows carry them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import duckdb

from promptlab.records import (
    FINAL_ITEM_STATUSES,
    OPEN_ITEM_STATUSES,
    FailureExample,
    ItemCounts,
    ItemStatus,
    OutputHistory,
    RunRecord,
    RunStatus,
    RunSummary,
    RunWithCounts,
    VariantSummary,
)
from promptlab.store.connection import Store
from promptlab.store.runs import RUN_COLUMNS, fetch_events, fetch_run, run_from_row

#: Per-state item counts as SQL aggregates over `items`, named as ItemCounts fields.
_COUNT_COLUMNS = ", ".join(f"count(*) FILTER (WHERE status = '{s}') AS {s}" for s in ItemStatus)
#: Latency percentiles of a variant's succeeded results, as VariantSummary names them.
LATENCY_QUANTILES = (0.5, 0.9, 0.99)


class ReadModels:
    """Read-only queries over runs, items, attempts and results.

    Each call reads on its own; inside `snapshot()` every call reads the same committed
    state, so numbers shown side by side (progress, summary, variants) agree.
    """

    def __init__(self, store: Store, cursor: duckdb.DuckDBPyConnection | None = None) -> None:
        self.store = store
        self._cursor = cursor

    @contextmanager
    def snapshot(self) -> Iterator[ReadModels]:
        """Read models bound to one read transaction: one consistent view of the store."""
        with self.store.read() as cur:
            cur.begin()
            try:
                yield ReadModels(self.store, cur)
            finally:
                cur.rollback()  # nothing was written: ending the snapshot is all this does

    @contextmanager
    def _reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._cursor is not None:
            yield self._cursor
        else:
            with self.store.read() as cur:
                yield cur

    def run(self, run_id: str) -> RunRecord:
        with self._reading() as cur:
            return fetch_run(cur, run_id)

    def item_counts_of(self, run_id: str) -> ItemCounts:
        """Items of the run per state, typed."""
        counts = self.item_counts(run_id)
        return ItemCounts(**{str(k): v for k, v in counts.items()})

    def events(self, run_id: str) -> list[tuple[RunStatus, str | None, datetime]]:
        """Every status change of the run, oldest first: (status, reason, when)."""
        with self._reading() as cur:
            return fetch_events(cur, run_id)

    def results_with_rows(self, run_id: str, batch_rows: int = 5_000) -> Iterator[tuple[Any, ...]]:
        """Each final row with its dataset row (JSON), in plan order, a batch at a time:
        (key, row_values, status, output_text, input_tokens, output_tokens, finish_reason,
        model_version, error_kind, error_message)."""
        with self.store.read() as cur:
            cur.execute(
                "SELECT r.idempotency_key, rr.row_values, r.status, r.output_text, "
                "r.input_tokens, r.output_tokens, r.finish_reason, r.model_version, "
                "r.error_kind, r.error_message FROM results r JOIN run_rows rr "
                "ON rr.run_id = r.run_id AND rr.row_index = r.row_index "
                "WHERE r.run_id = ? ORDER BY r.seq",
                [run_id],
            )
            while rows := cur.fetchmany(batch_rows):
                yield from rows

    def last_start(self, run_id: str) -> datetime | None:
        """When the run last started running (its resume, if it was resumed)."""
        with self._reading() as cur:
            row = cur.execute(
                "SELECT max(changed_at) FROM run_events WHERE run_id = ? AND status = 'running'",
                [run_id],
            ).fetchone()
        return row[0] if row else None

    def item_counts(self, run_id: str) -> dict[str, int]:
        """Items per state (every state present, zero when none), keyed by ItemStatus."""
        with self._reading() as cur:
            rows = cur.execute(
                "SELECT status, count(*) FROM items WHERE run_id = ? GROUP BY status", [run_id]
            ).fetchall()
        counts: dict[str, int] = dict.fromkeys((*OPEN_ITEM_STATUSES, *FINAL_ITEM_STATUSES), 0)
        counts.update({ItemStatus(r[0]): int(r[1]) for r in rows})
        return counts

    def output_history(self) -> dict[tuple[str, str], OutputHistory]:
        """Mean output tokens and latency of succeeded results per (version id, model)."""
        with self._reading() as cur:
            rows = cur.execute(
                "SELECT prompt_version_id, model, count(*), avg(output_tokens), avg(latency_ms) "
                "FROM results WHERE status = 'succeeded' GROUP BY ALL"
            ).fetchall()
        return {
            (r[0], r[1]): OutputHistory(int(r[2]), float(r[3] or 0), float(r[4] or 0)) for r in rows
        }

    def list_runs_with_counts(self, limit: int = 100) -> list[RunWithCounts]:
        """The newest `limit` runs, newest first, each with its items per state: one query."""
        with self._reading() as cur:
            rows = cur.execute(
                f"WITH recent AS (SELECT {RUN_COLUMNS} FROM runs "
                "ORDER BY submitted_at DESC LIMIT ?), "
                f"counts AS (SELECT run_id, {_COUNT_COLUMNS} FROM items "
                "WHERE run_id IN (SELECT run_id FROM recent) GROUP BY run_id) "
                f"SELECT recent.*, {', '.join(f'coalesce(counts.{s}, 0)' for s in ItemStatus)} "
                "FROM recent LEFT JOIN counts USING (run_id) ORDER BY recent.submitted_at DESC",
                [limit],
            ).fetchall()
        width = len(RUN_COLUMNS.split(","))
        return [
            RunWithCounts(
                run_from_row(r[:width]),
                ItemCounts(**{s.value: int(n) for s, n in zip(ItemStatus, r[width:], strict=True)}),
            )
            for r in rows
        ]

    def variant_summaries(self, run_id: str) -> list[VariantSummary]:
        """Each variant of the run, in variant order, with its counts, latency, usage, cost.

        Variants with no items or results yet are included, with zero counts and None
        latencies. One query: counts per variant from `items`, the rest from `results`.
        """
        quantiles = ", ".join(str(q) for q in LATENCY_QUANTILES)
        with self._reading() as cur:
            rows = cur.execute(
                f"WITH counts AS (SELECT variant_index, {_COUNT_COLUMNS} FROM items "
                "WHERE run_id = ? GROUP BY variant_index), "
                "usage AS (SELECT variant, "
                f"quantile_cont(latency_ms, [{quantiles}]) AS latency, "
                "sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, "
                "sum(cost_usd) AS cost_usd "
                "FROM results WHERE run_id = ? AND status = 'succeeded' GROUP BY variant) "
                "SELECT v.variant_index, v.name, v.prompt_ref, v.endpoint, v.model, "
                "coalesce(c.succeeded, 0), coalesce(c.failed, 0), coalesce(c.cancelled, 0), "
                "coalesce(c.pending, 0) + coalesce(c.in_flight, 0), "
                "c.succeeded / nullif(c.succeeded + c.failed + c.cancelled, 0), "
                "u.latency, coalesce(u.input_tokens, 0), coalesce(u.output_tokens, 0), "
                "coalesce(u.cost_usd, 0) "
                "FROM run_variants v LEFT JOIN counts c USING (variant_index) "
                "LEFT JOIN usage u ON u.variant = v.name "
                "WHERE v.run_id = ? ORDER BY v.variant_index",
                [run_id, run_id, run_id],
            ).fetchall()
        return [
            VariantSummary(
                variant_index=int(r[0]),
                name=r[1],
                prompt_ref=r[2],
                endpoint=r[3],
                model=r[4],
                succeeded=int(r[5]),
                failed=int(r[6]),
                cancelled=int(r[7]),
                open=int(r[8]),
                completion_rate=None if r[9] is None else float(r[9]),
                latency_p50_ms=r[10][0] if r[10] else None,
                latency_p90_ms=r[10][1] if r[10] else None,
                latency_p99_ms=r[10][2] if r[10] else None,
                input_tokens=int(r[11]),
                output_tokens=int(r[12]),
                cost_usd=float(r[13]),
            )
            for r in rows
        ]

    def failure_kinds(self, run_id: str) -> dict[str, int]:
        """Failed items per error kind, most frequent first."""
        with self._reading() as cur:
            rows = cur.execute(
                "SELECT error_kind, count(*) FROM results WHERE run_id = ? AND status = 'failed' "
                "GROUP BY error_kind ORDER BY 2 DESC",
                [run_id],
            ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def failure_examples(self, run_id: str, limit: int = 10) -> list[FailureExample]:
        """The first failed items of a run, in dataset order, with their messages."""
        with self._reading() as cur:
            rows = cur.execute(
                "SELECT row_index, variant, error_kind, error_message FROM results "
                "WHERE run_id = ? AND status = 'failed' ORDER BY seq LIMIT ?",
                [run_id, limit],
            ).fetchall()
        return [FailureExample(int(r[0]), r[1], str(r[2]), r[3] or "") for r in rows]

    def summary(self, run_id: str) -> RunSummary:
        """Totals over the run's final rows: tokens, cost, latency percentiles, attempts."""
        with self._reading() as cur:
            row = cur.execute(
                "SELECT count(*), sum(input_tokens), sum(output_tokens), sum(cost_usd), "
                "quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95) "
                "FROM results WHERE run_id = ? AND status = 'succeeded'",
                [run_id],
            ).fetchone()
            attempts = cur.execute(
                "SELECT count(*), count(*) FILTER (WHERE error_kind = 'rate_limit') "
                "FROM attempts WHERE run_id = ?",
                [run_id],
            ).fetchone()
        assert row is not None and attempts is not None
        return RunSummary(
            succeeded=int(row[0]),
            input_tokens=int(row[1] or 0),
            output_tokens=int(row[2] or 0),
            cost_usd=float(row[3] or 0.0),
            latency_p50_ms=row[4],
            latency_p95_ms=row[5],
            attempts=int(attempts[0]),
            rate_limited_attempts=int(attempts[1]),
        )
