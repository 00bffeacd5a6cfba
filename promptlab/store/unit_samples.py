"""Per-unit samples for `promptlab compare`: each arm's sums per unit and its latencies.

A split run's unit is the row's assignment unit; a production log's is its `unit_id`;
results across runs take their split run's unit. A row without one is a unit of its own
(`'#'` and its key), so the analysis falls back to requests where nothing names a unit.
A named unit is kept as `'='` and its name (UNIT), so no name (`#123`, say) can be
taken for a row without one.
An all-mode run is clustered by dataset row, a replayed conversation log by session
(its rows' SESSION_KEY). Clicks count at most once per impression of a result, as in
promptlab/store/metrics.py.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from promptlab.records.sessions import SESSION_KEY
from promptlab.records.unit_samples import (
    COMPLETION,
    CTR,
    ERROR_RATE,
    SCORE_PREFIX,
    ArmSample,
    PairedSample,
    RatioSample,
    VersionStratum,
)
from promptlab.store.connection import Store
from promptlab.store.log_outcomes import outcome_ctes
from promptlab.store.metrics import MetricsReads, completed_predicate

if TYPE_CHECKING:
    import duckdb

#: A result's cluster in an all-mode replay: its row's value at the JSON path $cluster
#: (its session, or its user), else its session, else its row.
_CLUSTER = (
    "coalesce((SELECT coalesce('=' || json_extract_string(rr.row_values, $cluster), '#s' || "
    "json_extract_string(rr.row_values, '$." + SESSION_KEY + "')) FROM run_rows rr "
    "WHERE rr.run_id = $run AND rr.row_index = {t}.row_index), '#r' || {t}.row_index)"
)


def cluster_path(column: str | None) -> str:
    """The JSON path a replay's results are clustered on: a column of its log (its
    user's), or the session."""
    return "$." + (json.dumps(column) if column else SESSION_KEY)


#: A named unit of an assignment row `a`: its name after '=', never '#' (a fallback's).
UNIT = "'=' || a.unit_id"
#: Per result of `tagged` (key, unit, unitless, ok, timed, latency_ms): its unit as a
#: 64-bit hash (numpy groups those; DuckDB need not sort or number the units).
_REQUESTS = "SELECT hash(unit) AS u, unitless, ok, timed, latency_ms FROM tagged"
#: Feedback of `fbk` (k, key, unit_id, imp, clk) summed per unit hash.
_FEEDBACK = (
    "SELECT hash(coalesce(t.unit, '=' || f.unit_id, '#' || f.k)) AS u, sum(f.imp) AS imp, "
    "sum(least(f.clk, f.imp)) AS clk FROM fbk f LEFT JOIN tagged t ON t.key = f.key "
    # Feedback on a result outside the arm (finished before `since`) is not the arm's.
    "WHERE f.key IS NULL OR t.key IS NOT NULL GROUP BY 1"
)
#: Each scorer's scores of `tagged` results summed per unit hash (promptlab/evaluation/).
_SCORES = (
    "SELECT s.scorer, hash(t.unit) AS u, sum(s.value) AS num, count(s.value) AS den "
    "FROM scores s JOIN tagged t ON t.key = s.idempotency_key GROUP BY ALL"
)


#: Per unit of `outcome_ctes` (one version): its requests and the sums of its rates.
_UNIT_OUTCOMES = (
    "SELECT hash(unit) AS u, lines, unitless::INTEGER AS unitless, known, done, shown, clk "
    "FROM outcomes"
)
#: Per unit and score name of `outcome_ctes`: the values' total and count.
_UNIT_SCORES = "SELECT name, hash(unit) AS u, total AS num, n AS den FROM scored"
#: Per unit of `outcome_ctes` over every version (CUPED's pre-period).
_PRE_OUTCOMES = (
    "SELECT hash(unit) AS u, sum(known) AS known, sum(done) AS done, sum(shown) AS shown, "
    "sum(clk) AS clk FROM outcomes GROUP BY unit"
)


class SampleReads:
    """The samples of runs, versions and production logs, one read each."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._metrics = MetricsReads(store)

    def _done(self, cur: duckdb.DuckDBPyConnection) -> str:
        return completed_predicate(self._metrics.columns(cur))

    def run_arm(
        self,
        run_id: str,
        variant: str,
        by_row: bool = False,
        replay: bool = False,
        user_column: str | None = None,
    ) -> ArmSample:
        """One variant of a run, per assignment unit (per dataset row with `by_row`, per
        session of a `replay`, or per user: its log's `user_column`)."""
        cluster = cluster_path(user_column) if replay else None
        with self.store.read() as cur:
            unit = "'#r' || r.row_index" if by_row else f"coalesce({UNIT}, '#' || r.key)"
            unit = _CLUSTER.format(t="r") if cluster else unit
            unitless = "false" if by_row or cluster else "a.unit_id IS NULL"
            ctes = (
                f"WITH res AS (SELECT idempotency_key AS key, row_index, ({self._done(cur)}) "
                "AS ok, status = 'succeeded' AND latency_ms IS NOT NULL AS timed, latency_ms "
                "FROM results WHERE run_id = $run AND variant = $variant), "
                "asg AS (SELECT row_index, any_value(unit_id) AS unit_id FROM assignments "
                "WHERE run_id = $run GROUP BY row_index), "
                f"tagged AS (SELECT r.*, {unit} AS unit, {unitless} AS unitless "
                "FROM res r LEFT JOIN asg a USING (row_index)), "
                "fbk AS (SELECT coalesce(idempotency_key, unit_id) AS k, "
                "idempotency_key AS key, any_value(unit_id) AS unit_id, "
                "count(*) FILTER (WHERE kind = 'impression') AS imp, "
                "count(*) FILTER (WHERE kind = 'click') AS clk FROM feedback "
                "WHERE run_id = $run AND variant = $variant GROUP BY k, key) "
            )
            params = {"run": run_id, "variant": variant}
            return _arm(cur, variant, ctes, params | ({"cluster": cluster} if cluster else {}))

    def version_strata(
        self, version_a: str, version_b: str, since: datetime | None
    ) -> list[VersionStratum]:
        """Each (run, endpoint, model) holding results of either version, oldest run
        first, with each version's variants and results there."""
        window = " AND finished_at >= $since" if since is not None else ""
        params: dict[str, Any] = {"a": version_a, "b": version_b}
        if since is not None:
            params["since"] = since
        with self.store.read() as cur:
            found = cur.execute(
                "SELECT run_id, endpoint, model, prompt_version_id = $b AS is_b, "
                "list(DISTINCT variant ORDER BY variant), count(*), min(finished_at) "
                "FROM results WHERE prompt_version_id IN ($a, $b)"
                f"{window} GROUP BY ALL",
                params,
            ).fetchall()
        groups: dict[tuple[str, str, str], dict[bool, tuple[tuple[str, ...], int]]] = {}
        first: dict[tuple[str, str, str], Any] = {}
        for run_id, endpoint, model, is_b, variants, count, started in found:
            key = (run_id, endpoint, model)
            groups.setdefault(key, {})[bool(is_b)] = (tuple(variants), int(count))
            first[key] = min(first.get(key, started), started)
        empty: tuple[tuple[str, ...], int] = ((), 0)
        return [
            VersionStratum(
                *key,
                variants_a=sides.get(False, empty)[0],
                variants_b=sides.get(True, empty)[0],
                results_a=sides.get(False, empty)[1],
                results_b=sides.get(True, empty)[1],
            )
            for key, sides in sorted(groups.items(), key=lambda kv: (first[kv[0]], kv[0]))
        ]

    def version_arm(
        self,
        version_id: str,
        label: str,
        since: datetime | None,
        within: VersionStratum | None = None,
    ) -> ArmSample:
        """A prompt version's results across runs (or `within` one run, endpoint and
        model): a split run's rows by their unit."""
        window = " AND finished_at >= $since" if since is not None else ""
        if within is not None:
            window += " AND run_id = $run AND endpoint = $endpoint AND model = $model"
        fb_window = " AND event_time >= $since" if since is not None else ""
        if within is not None:
            fb_window += " AND run_id = $run"
        with self.store.read() as cur:
            ctes = (
                f"WITH res AS (SELECT idempotency_key AS key, run_id, row_index, "
                f"({self._done(cur)}) AS ok, status = 'succeeded' AND latency_ms IS NOT NULL "
                "AS timed, latency_ms FROM results WHERE prompt_version_id = $version"
                f"{window}), "
                "asg AS (SELECT run_id, row_index, any_value(unit_id) AS unit_id "
                "FROM assignments WHERE run_id IN (SELECT DISTINCT run_id FROM res) "
                "GROUP BY ALL), "
                f"tagged AS (SELECT r.*, coalesce({UNIT}, '#' || r.key) AS unit, "
                "a.unit_id IS NULL AS unitless FROM res r LEFT JOIN asg a "
                "USING (run_id, row_index)), "
                "fbk AS (SELECT coalesce(idempotency_key, unit_id) AS k, "
                "idempotency_key AS key, any_value(unit_id) AS unit_id, "
                "count(*) FILTER (WHERE kind = 'impression') AS imp, "
                "count(*) FILTER (WHERE kind = 'click') AS clk FROM feedback "
                # Events sent live are about production requests (log_arm), not results.
                f"WHERE prompt_version_id = $version AND event_id IS NULL{fb_window} "
                "GROUP BY k, key) "
            )
            params: dict[str, Any] = {"version": version_id}
            if since is not None:
                params["since"] = since
            if within is not None:
                params |= {"run": within.run_id, "endpoint": within.endpoint, "model": within.model}
            return _arm(cur, label, ctes, params)

    def first_log_time(self, version_ids: list[str]) -> datetime | None:
        """When the first production log line of any of these versions happened."""
        with self.store.read() as cur:
            row = cur.execute(
                "SELECT min(event_time) FROM production_logs WHERE prompt_version_id IN "
                f"({', '.join('?' for _ in version_ids)})",
                version_ids,
            ).fetchone()
        return row[0] if row else None

    def log_arm(
        self,
        version_id: str,
        label: str,
        since: datetime | None,
        pre_before: datetime | None = None,
    ) -> ArmSample:
        """A version's production requests per `unit_id` (one without is its own unit),
        with the feedback events about them (promptlab/store/log_outcomes.py): completion,
        CTR and each named score; with `pre_before`, each unit's requests of any version
        before then too."""
        window = " AND event_time >= $since" if since is not None else ""
        where = f"prompt_version_id = $version{window}"
        params: dict[str, Any] = {"version": version_id}
        if since is not None:
            params["since"] = since
        with self.store.read() as cur:
            return arm_from_logs(cur, label, where, where, params, pre_before=pre_before)

    def paired(
        self, run_id: str, a: str, b: str, replay: bool = False, user_column: str | None = None
    ) -> PairedSample:
        """Variants A and B of an all-mode run over the (row, repeat) pairs both finished,
        clustered by row (by session of a `replay`, or by user: its log's `user_column`)."""
        import numpy as np

        cluster = cluster_path(user_column) if replay else None
        with self.store.read() as cur:
            done = self._done(cur)
            pairs = cur.execute(
                f"WITH x AS (SELECT row_index, repeat, ({done}) AS ok, CASE WHEN "
                "status = 'succeeded' THEN latency_ms END AS lat FROM results "
                "WHERE run_id = $run AND variant = $a), "
                f"y AS (SELECT row_index, repeat, ({done}) AS ok, CASE WHEN "
                "status = 'succeeded' THEN latency_ms END AS lat FROM results "
                "WHERE run_id = $run AND variant = $b) "
                f"SELECT {_CLUSTER.format(t='x') if cluster else 'row_index'} AS cluster, "
                "x.ok AS ok_a, y.ok AS ok_b, "
                "x.lat IS NOT NULL AND y.lat IS NOT NULL AS timed, "
                "coalesce(x.lat, 0) AS lat_a, coalesce(y.lat, 0) AS lat_b "
                "FROM x JOIN y USING (row_index, repeat)",
                {"run": run_id, "a": a, "b": b} | ({"cluster": cluster} if cluster else {}),
            ).fetchnumpy()
        _, index = np.unique(np.asarray(pairs["cluster"]), return_inverse=True)
        rows = int(index.max()) + 1 if index.size else 0
        timed = np.asarray(pairs["timed"], dtype=bool)
        return PairedSample(
            name_a=a,
            name_b=b,
            rows=rows,
            pairs=int(index.size),
            finished=_sum(index, np.ones(index.size), rows),
            completed_a=_sum(index, pairs["ok_a"], rows),
            completed_b=_sum(index, pairs["ok_b"], rows),
            latency_a=_f(pairs["lat_a"])[timed],
            latency_b=_f(pairs["lat_b"])[timed],
            latency_row=index[timed].astype(np.int64),
        )


def _f(column: Any) -> Any:
    import numpy as np

    return np.asarray(column, dtype=np.float64)


def _u(column: Any) -> Any:
    import numpy as np

    return np.asarray(column, dtype=np.uint64)


def _sum(index: Any, values: Any, k: int) -> Any:
    """Per unit (`index` into 0..k-1), the sum of `values`, as floats."""
    import numpy as np

    return np.bincount(index, weights=np.asarray(values, dtype=np.float64), minlength=k)


def _aligned(ids: Any, per_unit: dict[str, Any], num: str, den: str) -> RatioSample:
    """Per-unit sums of another query, put in the order of `ids` (0 for units absent)."""
    return RatioSample(*_columns(ids, per_unit, num, den))


def _columns(ids: Any, per_unit: dict[str, Any], *names: str) -> list[Any]:
    """Columns of per-unit rows (`u` their unit), in the order of `ids` (0 where absent)."""
    import numpy as np

    found = _u(per_unit["u"])
    at = np.searchsorted(ids, found)
    hit = (at < ids.size) & (ids[np.minimum(at, ids.size - 1)] == found)
    columns = []
    for name in names:
        values = np.zeros(ids.size)
        values[at[hit]] = _f(per_unit[name])[hit]
        columns.append(values)
    return columns


def _score_rates(ids: Any, scores: dict[str, Any], column: str = "name") -> dict[str, RatioSample]:
    """Each score's per-unit sums (`scores`: its name in `column`, u, num, den), by
    its metric name, aligned to `ids`."""
    import numpy as np

    names = np.asarray(scores[column], dtype=object)
    return {
        SCORE_PREFIX + str(each): _aligned(
            ids, {c: scores[c][names == each] for c in ("u", "num", "den")}, "num", "den"
        )
        for each in sorted(set(names))
    }


def _arm(cur: duckdb.DuckDBPyConnection, name: str, ctes: str, params: dict[str, Any]) -> ArmSample:
    """An arm from its results (`tagged`) and feedback (`fbk`), grouped per unit here."""
    import numpy as np

    requests = cur.execute(ctes + _REQUESTS, params).fetchnumpy()
    feedback = cur.execute(ctes + _FEEDBACK, params).fetchnumpy()
    scores = cur.execute(ctes + _SCORES, params).fetchnumpy()
    result_units, feedback_units = _u(requests["u"]), _u(feedback["u"])
    ids = np.unique(np.concatenate([result_units, feedback_units]))
    k = ids.size
    index = np.searchsorted(ids, result_units)
    shown = _aligned(ids, feedback, "clk", "imp")
    finished = _sum(index, np.ones(index.size), k)
    unitless = _sum(index, requests["unitless"], k)
    timed = np.asarray(requests["timed"], dtype=bool)
    scored = _score_rates(ids, scores, "scorer")
    return ArmSample(
        name=name,
        units=int((finished > 0).sum()),
        requests=int(index.size),
        unitless=int(((unitless > 0) & (finished > 0)).sum()),
        rates={
            COMPLETION: RatioSample(_sum(index, requests["ok"], k), finished),
            CTR: shown,
            **scored,
        },
        latency=_f(requests["latency_ms"])[timed],
        latency_unit=index[timed].astype(np.int64),
        unit_keys=ids,
        unit_requests=finished,
    )


#: Per unit of `production_logs` rows: attempts and failed attempts.
_UNIT_ERRORS = (
    "SELECT hash(coalesce('=' || unit_id, '#' || rowid)) AS u, "
    "sum(coalesce(attempts, 1)) AS attempts, "
    "sum(coalesce(failed_attempts, (coalesce(http_status, 200) <> 200)::INTEGER)) AS failed "
    "FROM production_logs WHERE {where} GROUP BY u"
)


def arm_from_logs(
    cur: duckdb.DuckDBPyConnection,
    label: str,
    lines_where: str,
    events_where: str,
    params: dict[str, Any],
    pre_before: datetime | None = None,
    errors: bool = False,
) -> ArmSample:
    """The production requests `lines_where` keeps, per unit, with the feedback events
    `events_where` keeps (see SampleReads.log_arm); `errors` adds ERROR_RATE."""
    import numpy as np

    ctes = outcome_ctes(lines_where, events_where)
    units = _read(cur, ctes + _UNIT_OUTCOMES, params)
    scores = _read(cur, ctes + _UNIT_SCORES, params)
    timed = _read(
        cur,
        "SELECT hash(coalesce('=' || unit_id, '#' || rowid)) AS u, latency_ms "
        f"FROM production_logs WHERE {lines_where} AND latency_ms IS NOT NULL",
        params,
    )
    failed = _read(cur, _UNIT_ERRORS.format(where=lines_where), params) if errors else None
    before = None
    if pre_before is not None:
        before = _pre_outcomes(cur, pre_before)
    ids = np.unique(np.concatenate([_u(units["u"]), _u(scores["u"])]))
    lines, unitless = _columns(ids, units, "lines", "unitless")
    pre_rates = {}
    if before is not None:
        pre_rates = {
            COMPLETION: _aligned(ids, before, "done", "known"),
            CTR: _aligned(ids, before, "clk", "shown"),
        }
    latency_unit = np.searchsorted(ids, _u(timed["u"]))
    return ArmSample(
        name=label,
        units=int((lines > 0).sum()),
        requests=int(lines.sum()),
        unitless=int(((unitless > 0) & (lines > 0)).sum()),
        rates={
            COMPLETION: _aligned(ids, units, "done", "known"),
            CTR: _aligned(ids, units, "clk", "shown"),
            **_score_rates(ids, scores),
            **({ERROR_RATE: _aligned(ids, failed, "failed", "attempts")} if failed else {}),
        },
        latency=_f(timed["latency_ms"]),
        latency_unit=latency_unit.astype(np.int64),
        pre=pre_rates,
        unit_keys=ids,
        unit_requests=lines,
    )


def _pre_outcomes(cur: duckdb.DuckDBPyConnection, before: datetime) -> dict[str, Any]:
    """Each named unit's requests of any version before `before` (CUPED's covariate)."""
    pre = "event_time < $before"
    return dict(
        cur.execute(
            outcome_ctes(f"{pre} AND unit_id IS NOT NULL", pre) + _PRE_OUTCOMES,
            {"before": before},
        ).fetchnumpy()
    )


def _read(cur: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """The columns `sql` reads, given the parameters it names (DuckDB refuses others)."""
    used = {k: v for k, v in params.items() if f"${k}" in sql}
    return dict(cur.execute(sql, used).fetchnumpy())
