"""Metrics per run variant and per prompt version, computed in DuckDB, and latency samples
as NumPy arrays (the per-unit samples `promptlab compare` tests are in samples.py).

Completion counts a succeeded result whose output passed its check. Results gain
`check_status` / `rule_status` with output checks (migration 0005_output_checks); the
predicate is built from the columns the table has, so it reads databases from before
and after that migration alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import duckdb

from promptlab.errors import NotFoundError
from promptlab.records import LogMetricsRow, MetricsRow
from promptlab.records.metrics import LogScore
from promptlab.store.connection import Store
from promptlab.store.log_outcomes import version_totals
from promptlab.store.runs import fetch_run

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

#: The latency percentiles a metrics row carries, in MetricsRow field order.
METRIC_QUANTILES = (0.5, 0.9, 0.95, 0.99)
#: Output check statuses that count as complete (promptlab.checks.validation's names).
COMPLETE_CHECKS = ("valid", "repaired", "no_schema")

#: The aggregates of one group of results, in the order `_row` reads them.
_AGGREGATES = (
    "count(DISTINCT run_id) AS runs, count(*) AS finished, "
    "count(*) FILTER (WHERE status = 'succeeded') AS succeeded, "
    "count(*) FILTER (WHERE status = 'failed') AS failed, "
    "count(*) FILTER (WHERE status = 'cancelled') AS cancelled, "
    "count(*) FILTER (WHERE {completed}) AS completed, "
    "histogram(error_kind) FILTER (WHERE status = 'failed') AS kinds, "
    "avg(latency_ms) FILTER (WHERE status = 'succeeded') AS latency_mean, "
    "quantile_cont(latency_ms, [{quantiles}]) FILTER (WHERE status = 'succeeded') AS latency, "
    "coalesce(sum(input_tokens), 0) AS input_tokens, "
    "coalesce(sum(output_tokens), 0) AS output_tokens, "
    "coalesce(sum(cost_usd), 0) AS cost_usd, "
    "min(finished_at) AS first_at, max(finished_at) AS last_at, "
    "count(*) FILTER (WHERE cache_hit) AS cache_hits, {checks}"
)
#: Output check counts (checked = checked against a schema or rules, as on the Runs page).
_CHECK_AGGREGATES = (
    "count(*) FILTER (WHERE check_status IN ('valid', 'repaired', 'invalid', 'truncated')) "
    "AS checked, "
    "count(*) FILTER (WHERE check_status = 'valid') AS valid, "
    "count(*) FILTER (WHERE check_status = 'repaired') AS repaired, "
    "count(*) FILTER (WHERE check_status = 'invalid') AS invalid, "
    "count(*) FILTER (WHERE check_status = 'truncated') AS truncated, "
    "count(*) FILTER (WHERE rule_status = 'failed') AS rule_failed"
)
#: The same names on a database from before output checks: nothing was checked.
_NO_CHECK_AGGREGATES = (
    "0 AS checked, 0 AS valid, 0 AS repaired, 0 AS invalid, 0 AS truncated, 0 AS rule_failed"
)
#: The check counts as selected from `agg`, in the order `_row` reads them.
_CHECK_COLUMNS = (
    "coalesce(a.checked, 0), coalesce(a.valid, 0), coalesce(a.repaired, 0), "
    "coalesce(a.invalid, 0), coalesce(a.truncated, 0), coalesce(a.rule_failed, 0)"
)


#: Feedback counts per result (or per unit, for rows that name no result) of `source`
#: (the table, or a CTE shaped like it), in a CTE named `fbk`: a click counts at most
#: once per impression of the same thing.
_FEEDBACK_PER_KEY = (
    "fbk AS (SELECT {group}, coalesce(idempotency_key, unit_id) AS k, "
    "count(*) FILTER (WHERE kind = 'impression') AS imp, "
    "count(*) FILTER (WHERE kind = 'click') AS clk, "
    "count(*) FILTER (WHERE kind = 'thumbs_up') AS up, "
    "count(*) FILTER (WHERE kind = 'thumbs_down') AS down "
    "FROM {source} WHERE {where} GROUP BY ALL), "
    "fb AS (SELECT {group}, sum(imp) AS impressions, sum(least(clk, imp)) AS clicks, "
    "sum(up) AS up, sum(down) AS down FROM fbk GROUP BY ALL)"
)
#: The feedback counts as selected from `fb`, in the order `_row` reads them.
_FEEDBACK_COLUMNS = (
    "coalesce(f.impressions, 0), coalesce(f.clicks, 0), coalesce(f.up, 0), coalesce(f.down, 0)"
)


def completed_predicate(columns: set[str]) -> str:
    """SQL that is true for a result that counts as complete, given `results`' columns."""
    parts = ["status = 'succeeded'"]
    if "check_status" in columns:
        allowed = ", ".join(f"'{c}'" for c in COMPLETE_CHECKS)
        parts.append(f"coalesce(check_status, 'no_schema') IN ({allowed})")
    if "rule_status" in columns:
        parts.append("coalesce(rule_status, '') <> 'failed'")
    return " AND ".join(parts)


class MetricsReads:
    """Aggregates and samples over `results`; each call reads on its own."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def columns(self, cur: duckdb.DuckDBPyConnection) -> set[str]:
        rows = cur.execute(
            "SELECT column_name FROM duckdb_columns() "
            "WHERE table_name = 'results' AND schema_name = 'main'"
        ).fetchall()
        return {r[0] for r in rows}

    def _aggregates(self, cur: duckdb.DuckDBPyConnection) -> str:
        columns = self.columns(cur)
        quantiles = ", ".join(str(q) for q in METRIC_QUANTILES)
        checks = (
            _CHECK_AGGREGATES
            if {"check_status", "rule_status"} <= columns
            else _NO_CHECK_AGGREGATES
        )
        return _AGGREGATES.format(
            completed=completed_predicate(columns), quantiles=quantiles, checks=checks
        )

    def run_metrics(self, run_id: str, since: datetime | None = None) -> list[MetricsRow]:
        """One row per variant of the run, in variant order (variants with no results too)."""
        window, args = _since(since)
        fb_window, fb_args = _since(since, "event_time")
        with self.store.read() as cur:
            fetch_run(cur, run_id)
            feedback = _FEEDBACK_PER_KEY.format(
                group="variant", source="feedback", where=f"run_id = ?{fb_window}"
            )
            rows = cur.execute(
                f"WITH {feedback}, "
                f"agg AS (SELECT variant, {self._aggregates(cur)} FROM results "
                f"WHERE run_id = ?{window} GROUP BY variant), "
                "open AS (SELECT variant_index, count(*) AS open FROM items WHERE run_id = ? "
                "AND status IN ('pending', 'in_flight') GROUP BY variant_index), "
                "names AS (SELECT id, any_value(prompt_name) AS prompt_name, "
                "any_value(semver) AS semver FROM prompt_versions GROUP BY id) "
                "SELECT ?, v.name, n.prompt_name, n.semver, v.prompt_version_id, "
                "v.endpoint || ':' || v.model, coalesce(a.runs, 0), coalesce(a.finished, 0), "
                "coalesce(a.succeeded, 0), coalesce(a.failed, 0), coalesce(a.cancelled, 0), "
                "coalesce(o.open, 0), coalesce(a.completed, 0), a.kinds, a.latency_mean, "
                "a.latency, coalesce(a.input_tokens, 0), coalesce(a.output_tokens, 0), "
                f"coalesce(a.cost_usd, 0), a.first_at, a.last_at, {_CHECK_COLUMNS}, "
                f"{_FEEDBACK_COLUMNS}, coalesce(a.cache_hits, 0) "
                "FROM run_variants v LEFT JOIN agg a ON a.variant = v.name "
                "LEFT JOIN open o USING (variant_index) "
                "LEFT JOIN names n ON n.id = v.prompt_version_id "
                "LEFT JOIN fb f ON f.variant = v.name "
                "WHERE v.run_id = ? ORDER BY v.variant_index",
                [run_id, *fb_args, run_id, *args, run_id, run_id, run_id],
            ).fetchall()
        return [_row(r) for r in rows]

    def version_metrics(
        self, prompt: str | None = None, since: datetime | None = None
    ) -> list[MetricsRow]:
        """One row per (prompt version, endpoint:model) across runs, oldest version first.

        `prompt` keeps that prompt's versions; results of inline or request-file
        variants (no stored version) are listed by their version id without `prompt`.
        """
        window, args = _since(since)
        fb_window, fb_args = _since(since, "event_time")
        with self.store.read() as cur:
            name_filter, name_args, join, version_filter = _version_filters(cur, prompt)
            feedback = _version_feedback(fb_window, version_filter)
            rows = cur.execute(
                "WITH names AS (SELECT id, any_value(prompt_name) AS prompt_name, "
                "any_value(semver) AS semver, any_value(major) AS major, "
                "any_value(minor) AS minor, any_value(patch) AS patch FROM prompt_versions"
                f"{name_filter} GROUP BY id), "
                "agg0 AS (SELECT prompt_version_id, endpoint || ':' || model AS model, "
                f"{self._aggregates(cur)} FROM results WHERE true{window}{version_filter} "
                "GROUP BY ALL), "
                "agg AS (SELECT *, count(*) OVER (PARTITION BY prompt_version_id) = 1 "
                f"AS only_model FROM agg0), {feedback} "
                "SELECT NULL, NULL, n.prompt_name, n.semver, a.prompt_version_id, a.model, "
                "a.runs, a.finished, a.succeeded, a.failed, a.cancelled, 0, a.completed, "
                "a.kinds, a.latency_mean, a.latency, a.input_tokens, a.output_tokens, "
                f"a.cost_usd, a.first_at, a.last_at, {_CHECK_COLUMNS}, "
                "coalesce(f.impressions, 0) + coalesce(u.impressions, 0), "
                "coalesce(f.clicks, 0) + coalesce(u.clicks, 0), "
                "coalesce(f.up, 0) + coalesce(u.up, 0), coalesce(f.down, 0) + coalesce(u.down, 0), "
                f"a.cache_hits FROM agg a {join} names n ON n.id = a.prompt_version_id "
                "LEFT JOIN fb f ON f.prompt_version_id = a.prompt_version_id AND f.model = a.model "
                "LEFT JOIN fb u ON u.prompt_version_id = a.prompt_version_id AND u.model IS NULL "
                "AND a.only_model "
                "ORDER BY n.prompt_name NULLS LAST, n.major, n.minor, n.patch, "
                "a.prompt_version_id, a.model",
                [*name_args, *args, *name_args, *fb_args, *name_args],
            ).fetchall()
        return [_row(r) for r in rows]

    def log_metrics(
        self, prompt: str | None = None, since: datetime | None = None
    ) -> list[LogMetricsRow]:
        """One row per prompt version in the production logs (`prompt`: its versions only),
        oldest version first; `since` keeps requests and feedback events from then on
        (their event time). Completion, CTR and scores count the feedback events about
        the requests (promptlab/store/log_outcomes.py)."""
        window = "true AND event_time >= $since" if since is not None else "true"
        window_params: dict[str, Any] = {"since": since} if since is not None else {}
        params = dict(window_params)
        with self.store.read() as cur:
            name_filter = ""
            if prompt is not None:
                if not cur.execute("SELECT 1 FROM prompts WHERE name = ?", [prompt]).fetchone():
                    raise NotFoundError(f"no prompt named {prompt!r}")
                name_filter, params = " WHERE prompt_name = $prompt", params | {"prompt": prompt}
            join = "JOIN" if prompt is not None else "LEFT JOIN"
            quantiles = ", ".join(str(q) for q in METRIC_QUANTILES)
            rows = cur.execute(
                "WITH names AS (SELECT id, any_value(prompt_name) AS prompt_name, "
                "any_value(semver) AS semver, any_value(major) AS major, "
                "any_value(minor) AS minor, any_value(patch) AS patch FROM prompt_versions"
                f"{name_filter} GROUP BY id), "
                "agg AS (SELECT prompt_version_id, count(*) AS requests, "
                "avg(latency_ms) AS latency_mean, "
                f"quantile_cont(latency_ms, [{quantiles}]) AS latency, "
                "min(event_time) AS first_at, max(event_time) AS last_at "
                f"FROM production_logs WHERE {window} GROUP BY prompt_version_id) "
                "SELECT n.prompt_name, n.semver, a.* "
                f"FROM agg a {join} names n ON n.id = a.prompt_version_id "
                "ORDER BY n.prompt_name NULLS LAST, n.major, n.minor, n.patch, "
                "a.prompt_version_id",
                params,
            ).fetchall()
            totals, scores = version_totals(cur, window, window_params)
        return [_log_row(r, totals, scores) for r in rows]

    def log_latencies(
        self, version_id: str, since: datetime | None = None
    ) -> npt.NDArray[np.float64]:
        """A version's production log latencies (ms), from `since` on."""
        window, args = _since(since, "event_time")
        with self.store.read() as cur:
            columns = cur.execute(
                "SELECT latency_ms FROM production_logs WHERE prompt_version_id = ? "
                f"AND latency_ms IS NOT NULL{window}",
                [version_id, *args],
            ).fetchnumpy()
        return _floats(columns["latency_ms"])

    def latencies(self, run_id: str, variant: str) -> npt.NDArray[np.float64]:
        """Latencies (ms) of the variant's succeeded results, as a NumPy array."""
        with self.store.read() as cur:
            columns = cur.execute(
                "SELECT latency_ms FROM results WHERE run_id = ? AND variant = ? "
                "AND status = 'succeeded' AND latency_ms IS NOT NULL",
                [run_id, variant],
            ).fetchnumpy()
        return _floats(columns["latency_ms"])

    def assigned_units(self, run_id: str) -> dict[str, int]:
        """Distinct units a split run assigned to each variant (its `assignments`)."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT variant, count(DISTINCT unit_id) FROM assignments WHERE run_id = ? "
                "GROUP BY variant ORDER BY variant",
                [run_id],
            ).fetchall()
        return {r[0]: int(r[1]) for r in rows}


def _version_filters(
    cur: duckdb.DuckDBPyConnection, prompt: str | None
) -> tuple[str, list[Any], str, str]:
    """What keeps `prompt`'s versions in `version_metrics` (every version when None):
    the names filter, its args, the names join, the results filter. An unknown prompt
    is an error."""
    if prompt is None:
        return "", [], "LEFT JOIN", ""
    if not cur.execute("SELECT 1 FROM prompts WHERE name = ?", [prompt]).fetchone():
        raise NotFoundError(f"no prompt named {prompt!r}")
    return (
        " WHERE prompt_name = ?",
        [prompt],
        "JOIN",
        " AND prompt_version_id IN (SELECT id FROM prompt_versions WHERE prompt_name = ?)",
    )


def _version_feedback(fb_window: str, version_filter: str) -> str:
    """The CTEs (`multi`, `fsrc`, `fb`) summing feedback per version and model, after `agg`.

    Feedback on a result counts for that result's model; feedback that names only a
    version and a unit counts when the version ran on one model (else no row can claim
    it). Only versions run on several models need each result's model joined in: a join
    on every key passed the store's memory at a million. Events sent live (an event id)
    are about production requests, and count there (log_outcomes.py), not here.
    """
    return (
        "multi AS (SELECT DISTINCT prompt_version_id FROM agg WHERE NOT only_model), "
        "fsrc AS (SELECT f.prompt_version_id, r.model, f.idempotency_key, f.unit_id, "
        "f.kind FROM feedback f LEFT JOIN (SELECT idempotency_key, "
        "endpoint || ':' || model AS model FROM results "
        "WHERE prompt_version_id IN (SELECT prompt_version_id FROM multi)) r "
        f"USING (idempotency_key) WHERE f.event_id IS NULL{fb_window}{version_filter}), "
        + _FEEDBACK_PER_KEY.format(group="prompt_version_id, model", source="fsrc", where="true")
    )


def _since(since: datetime | None, column: str = "finished_at") -> tuple[str, list[Any]]:
    return (f" AND {column} >= ?", [since]) if since is not None else ("", [])


def _floats(column: Any) -> npt.NDArray[np.float64]:
    import numpy as np

    return np.asarray(column, dtype=np.float64)


def _row(r: tuple[Any, ...]) -> MetricsRow:
    latency = r[15]
    return MetricsRow(
        run_id=r[0],
        variant=r[1],
        prompt_name=r[2],
        prompt_version=r[3],
        prompt_version_id=r[4],
        model=r[5],
        runs=int(r[6]),
        finished=int(r[7]),
        succeeded=int(r[8]),
        failed=int(r[9]),
        cancelled=int(r[10]),
        open=int(r[11]),
        completed=int(r[12]),
        failed_by_kind={str(k): int(v) for k, v in (r[13] or {}).items()},
        latency_mean_ms=r[14],
        latency_p50_ms=latency[0] if latency else None,
        latency_p90_ms=latency[1] if latency else None,
        latency_p95_ms=latency[2] if latency else None,
        latency_p99_ms=latency[3] if latency else None,
        input_tokens=int(r[16]),
        output_tokens=int(r[17]),
        cost_usd=float(r[18]),
        first_finished_at=r[19],
        last_finished_at=r[20],
        checked=int(r[21]),
        valid=int(r[22]),
        repaired=int(r[23]),
        invalid=int(r[24]),
        truncated=int(r[25]),
        rule_failed=int(r[26]),
        impressions=int(r[27]),
        clicks=int(r[28]),
        thumbs_up=int(r[29]),
        thumbs_down=int(r[30]),
        cache_hits=int(r[31]),
    )


def _log_row(
    r: tuple[Any, ...],
    totals: dict[str, tuple[Any, ...]],
    scores: dict[str, list[tuple[str, int, int, float]]],
) -> LogMetricsRow:
    latency = r[5]
    known, done, shown, clicks = totals.get(r[2], (0, 0, 0, 0))
    return LogMetricsRow(
        prompt_name=r[0],
        prompt_version=r[1],
        prompt_version_id=r[2],
        requests=int(r[3]),
        latency_mean_ms=r[4],
        latency_p50_ms=latency[0] if latency else None,
        latency_p90_ms=latency[1] if latency else None,
        latency_p95_ms=latency[2] if latency else None,
        latency_p99_ms=latency[3] if latency else None,
        completion_known=known,
        completed=done,
        click_known=shown,
        clicks=clicks,
        first_event_at=r[6],
        last_event_at=r[7],
        scores=tuple(LogScore(*score) for score in scores.get(r[2], ())),
    )
