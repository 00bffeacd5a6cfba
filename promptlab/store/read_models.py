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
    FieldFailure,
    ItemCounts,
    ItemDetail,
    ItemPage,
    ItemStatus,
    OutputHistory,
    RunRecord,
    RunStatus,
    RunSummary,
    RunWithCounts,
    VariantSummary,
)
from promptlab.store.connection import Store
from promptlab.store.item_pages import (
    CHECK_STATUSES,
    MAX_ITEMS_PAGE,
    OUTPUT_PREVIEW_CHARS,
    fetch_item_detail,
    item_filter,
    item_page,
)
from promptlab.store.runs import RUN_COLUMNS, fetch_events, fetch_run, run_from_row

# One run's items (a page of the list, one item's detail) are read in item_pages.py;
# its limits stay importable from here.
__all__ = [
    "CHECK_STATUSES",
    "LATENCY_QUANTILES",
    "MAX_ITEMS_PAGE",
    "OUTPUT_PREVIEW_CHARS",
    "ReadModels",
]

#: Per-state item counts as SQL aggregates over `items`, named as ItemCounts fields.
_COUNT_COLUMNS = ", ".join(f"count(*) FILTER (WHERE status = '{s}') AS {s}" for s in ItemStatus)
#: Latency percentiles of a variant's succeeded results, as VariantSummary names them.
LATENCY_QUANTILES = (0.5, 0.9, 0.99)
#: Succeeded results per output check status (NULL: stored before checks, no schema).
_CHECK_COUNTS = (
    "count(*) FILTER (WHERE coalesce(check_status, 'no_schema') "
    "IN ('valid', 'repaired', 'no_schema') AND coalesce(rule_status, '') <> 'failed') "
    "AS completed, "
    "count(*) FILTER (WHERE rule_status = 'failed') AS rule_failed, "
    "count(*) FILTER (WHERE rule_status = 'warned') AS rule_warned, "
    "count(*) FILTER (WHERE check_status IN ('valid', 'repaired', 'invalid', 'truncated')) "
    "AS checked, "
    "count(*) FILTER (WHERE check_status = 'valid') AS valid, "
    "count(*) FILTER (WHERE check_status = 'repaired') AS repaired, "
    "count(*) FILTER (WHERE check_status = 'invalid') AS invalid, "
    "count(*) FILTER (WHERE check_status = 'truncated') AS truncated"
)


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

    def list_runs_with_counts(
        self, limit: int = 100, include: str | None = None
    ) -> list[RunWithCounts]:
        """The newest `limit` runs, newest first, each with its items per state: one query.
        `include` names a run listed too however old it is (a link to it), when it exists."""
        with self._reading() as cur:
            rows = cur.execute(
                f"WITH recent AS (SELECT {RUN_COLUMNS} FROM runs WHERE run_id IN "
                "(SELECT run_id FROM runs ORDER BY submitted_at DESC LIMIT ?) OR run_id = ?), "
                f"counts AS (SELECT run_id, {_COUNT_COLUMNS} FROM items "
                "WHERE run_id IN (SELECT run_id FROM recent) GROUP BY run_id) "
                f"SELECT recent.*, {', '.join(f'coalesce(counts.{s}, 0)' for s in ItemStatus)} "
                "FROM recent LEFT JOIN counts USING (run_id) ORDER BY recent.submitted_at DESC",
                [limit, include],
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
                "sum(cost_usd) AS cost_usd, "
                f"{_CHECK_COUNTS} "
                "FROM results WHERE run_id = ? AND status = 'succeeded' GROUP BY variant) "
                "SELECT v.variant_index, v.name, v.prompt_ref, v.endpoint, v.model, "
                "coalesce(c.succeeded, 0), coalesce(c.failed, 0), coalesce(c.cancelled, 0), "
                "coalesce(c.pending, 0) + coalesce(c.in_flight, 0), "
                "coalesce(u.completed, 0) / nullif(c.succeeded + c.failed + c.cancelled, 0), "
                "u.latency, coalesce(u.input_tokens, 0), coalesce(u.output_tokens, 0), "
                "coalesce(u.cost_usd, 0), "
                "coalesce(u.completed, 0), coalesce(u.checked, 0), coalesce(u.valid, 0), "
                "coalesce(u.repaired, 0), coalesce(u.invalid, 0), coalesce(u.truncated, 0), "
                "coalesce(u.rule_failed, 0), coalesce(u.rule_warned, 0) "
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
                completed=int(r[14]),
                checked=int(r[15]),
                valid=int(r[16]),
                repaired=int(r[17]),
                invalid=int(r[18]),
                truncated=int(r[19]),
                rule_failed=int(r[20]),
                rule_warned=int(r[21]),
            )
            for r in rows
        ]

    def field_failures(self, run_id: str, limit: int = 20) -> list[FieldFailure]:
        """The output paths that fail their check most, per variant, most outputs first.

        Array indexes are folded (`$.items[2].price` -> `$.items[*].price`); an output
        counts once per path however many errors it has there.
        """
        with self._reading() as cur:
            rows = cur.execute(
                "WITH errors AS (SELECT variant, idempotency_key, "
                "unnest(CAST(check_errors AS VARCHAR[])) AS error FROM results "
                "WHERE run_id = ? AND status = 'succeeded' "
                "AND check_status IN ('invalid', 'truncated')), "
                "split AS (SELECT variant, idempotency_key, "
                r"regexp_replace(split_part(error, ': ', 1), '\[\d+\]', '[*]', 'g') AS path, "
                "substr(error, strpos(error, ': ') + 2) AS message FROM errors), "
                "counted AS (SELECT *, count(*) OVER (PARTITION BY variant, path, message) AS n "
                "FROM split) "
                # The most frequent message; ties go to the first in text order (stable).
                "SELECT variant, path, count(DISTINCT idempotency_key) AS outputs, "
                "first(message ORDER BY n DESC, message) FROM counted GROUP BY variant, path "
                "ORDER BY outputs DESC, variant, path LIMIT ?",
                [run_id, limit],
            ).fetchall()
        return [FieldFailure(r[0], r[1], int(r[2]), r[3]) for r in rows]

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
                "quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95), "
                "count(*) FILTER (WHERE cache_hit) "
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
            cache_hits=int(row[6]),
        )

    # ---- one run's items -----------------------------------------------------------

    def items(
        self,
        run_id: str,
        *,
        status: str | None = None,
        variant: str | None = None,
        error_kind: str | None = None,
        search: str | None = None,
        check: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> ItemPage:
        """A page of the run's items in plan order, filtered, with the count that matches.

        `check` keeps items whose output check has that status. `search` matches a key
        prefix, or text (any case) in the dataset row, the output or the error message.
        Filtering and paging read `items` alone; the page's result
        fields come from `results` by `seq` (no key index there: zone maps on `seq` find
        the page's row groups). bench/item_reads.py times it on a million items.
        """
        condition, args = item_filter(run_id, status, variant, error_kind, search, check)
        offset = max(0, offset)
        limit = max(1, min(limit, MAX_ITEMS_PAGE))
        with self._reading() as cur:
            return item_page(cur, run_id, condition, args, offset, limit)

    def item_keys(self, run_id: str, prefix: str, limit: int = 2) -> list[str]:
        """Keys of the run's items that start with `prefix` (at most `limit` of them)."""
        with self._reading() as cur:
            rows = cur.execute(
                "SELECT idempotency_key FROM items WHERE run_id = ? "
                "AND starts_with(idempotency_key, ?) ORDER BY seq LIMIT ?",
                [run_id, prefix.lower(), limit],
            ).fetchall()
        return [r[0] for r in rows]

    def item_detail(self, run_id: str, key: str) -> ItemDetail:
        """One item with its dataset row, variant, final row and every attempt.

        Reads several tables: call it inside `snapshot()` for one consistent view (the
        facade does).
        """
        with self._reading() as cur:
            return fetch_item_detail(cur, run_id, key)
