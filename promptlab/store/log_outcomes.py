"""Production requests with the feedback events about them: what log metrics, the log
comparison's per-unit samples and the log series all count, written once.

A request is a `production_logs` row: imported from a file, or a live call through the
gateway (it has a `trace`). Feedback events that name no result count here: one naming
a call's trace is about that request; one naming a version and a unit is about that
unit's requests of the version.

- Completion. A request completed when its log says so, or a `completed` event names
  its trace; a unit's `completed` events without a trace mark as many of its requests
  not already completed, oldest first. It is known for a request whose log says
  whether it completed, for every live call (none completed until an event says so),
  and for every request of a unit a `completed` event names.
- CTR. Impressions are the requests whose log says whether they were clicked, and
  `impression` events (of the call, or of the unit); clicks likewise. A click counts at
  most once per impression of its unit, as feedback on results does.
- Scores. A `score` event's value counts for its name, per unit (the call's unit, else
  the event's), so a comparison tests it at the unit that was randomized.

`outcome_ctes` is the SQL; the filters are the caller's (with its parameters).
"""

from __future__ import annotations

from typing import Any

import duckdb

#: Requests per unit as `outcomes` gives them, in the order OUTCOME_COLUMNS names them.
OUTCOME_COLUMNS = ("unitless", "lines", "known", "done", "shown", "clk")


def outcome_ctes(lines_where: str, events_where: str) -> str:
    """`WITH` and CTEs over the requests `lines_where` keeps (a condition on
    `production_logs`) and the events `events_where` keeps (on `feedback`):

    - `lines`: one row per request: line, version, unit (`'='` and its unit id, else
      `'#'` and the row: a unit of its own), unitless, trace, latency_ms, event_time,
      known, done (completion, see the module);
    - `outcomes`: per (version, unit): OUTCOME_COLUMNS (shown and clk: impressions and
      the clicks counted on them);
    - `scored`: per (version, unit, name): total and n of the score events.
    """
    return (
        "WITH events AS (SELECT prompt_version_id AS version, unit_id, trace, kind, "
        "score_name, value FROM feedback "
        f"WHERE idempotency_key IS NULL AND ({events_where})), "
        "traced AS (SELECT trace, bool_or(kind = 'completed') AS done, "
        "count(*) FILTER (WHERE kind = 'impression') AS imp, "
        "count(*) FILTER (WHERE kind = 'click') AS clk "
        "FROM events WHERE trace IS NOT NULL GROUP BY trace), "
        "unit_events AS (SELECT version, '=' || unit_id AS unit, "
        "count(*) FILTER (WHERE kind = 'completed') AS done, "
        "count(*) FILTER (WHERE kind = 'impression') AS imp, "
        "count(*) FILTER (WHERE kind = 'click') AS clk "
        "FROM events WHERE trace IS NULL AND unit_id IS NOT NULL GROUP BY ALL), "
        "lines0 AS (SELECT p.line, p.prompt_version_id AS version, "
        "coalesce('=' || p.unit_id, '#' || p.line) AS unit, p.unit_id IS NULL AS unitless, "
        "p.trace, p.latency_ms, p.event_time, "
        "p.completed IS NOT NULL OR p.trace IS NOT NULL AS known, "
        "coalesce(p.completed, false) OR coalesce(t.done, false) AS done, "
        "(p.clicked IS NOT NULL)::BIGINT + coalesce(t.imp, 0) AS shown, "
        "coalesce(p.clicked, false)::BIGINT + coalesce(t.clk, 0) AS clk "
        "FROM (SELECT rowid AS line, * FROM production_logs "
        f"WHERE {lines_where}) p LEFT JOIN traced t ON t.trace = p.trace), "
        # A unit's completions that name no call go to its requests not yet completed,
        # oldest first (only units with such events are numbered).
        "marked AS (SELECT l.line, row_number() OVER (PARTITION BY l.version, l.unit "
        "ORDER BY l.event_time, l.line) <= u.done AS done FROM lines0 l "
        "JOIN unit_events u USING (version, unit) WHERE u.done > 0 AND NOT l.done), "
        "lines AS (SELECT l.* REPLACE (l.known OR m.line IS NOT NULL AS known, "
        "l.done OR coalesce(m.done, false) AS done) "
        "FROM lines0 l LEFT JOIN marked m USING (line)), "
        "per_unit AS (SELECT version, unit, bool_and(unitless) AS unitless, "
        "count(*) AS lines, count(*) FILTER (WHERE known) AS known, "
        "count(*) FILTER (WHERE done) AS done, sum(shown) AS shown, sum(clk) AS clk "
        "FROM lines GROUP BY version, unit), "
        "outcomes AS (SELECT version, unit, coalesce(p.unitless, false) AS unitless, "
        "coalesce(p.lines, 0) AS lines, coalesce(p.known, 0) AS known, "
        "coalesce(p.done, 0) AS done, coalesce(p.shown, 0) + coalesce(u.imp, 0) AS shown, "
        "least(coalesce(p.clk, 0) + coalesce(u.clk, 0), "
        "coalesce(p.shown, 0) + coalesce(u.imp, 0)) AS clk "
        "FROM per_unit p FULL JOIN unit_events u USING (version, unit) "
        "WHERE coalesce(p.lines, 0) > 0 OR coalesce(u.imp, 0) > 0), "
        "scored AS (SELECT e.version, coalesce(l.unit, '=' || e.unit_id, '#' || e.trace) "
        "AS unit, e.score_name AS name, sum(e.value) AS total, count(*) AS n "
        "FROM events e LEFT JOIN lines l ON l.trace = e.trace "
        "WHERE e.kind = 'score' GROUP BY ALL) "
    )


def version_totals(
    cur: duckdb.DuckDBPyConnection, window: str, params: dict[str, Any]
) -> tuple[dict[str, tuple[Any, ...]], dict[str, list[tuple[str, int, int, float]]]]:
    """Per version in the logs (from `window`, a condition on event_time such as
    `true AND event_time >= $since`): (completion known, completed, impressions,
    clicks), and each named score's (name, scores, units, mean), by name."""
    ctes = outcome_ctes(window, window)
    rates = cur.execute(
        ctes + "SELECT version, sum(known), sum(done), sum(shown), sum(clk) "
        "FROM outcomes GROUP BY version",
        params,
    ).fetchall()
    scores = cur.execute(
        ctes + "SELECT version, name, sum(n), count(DISTINCT unit), sum(total) / sum(n) "
        "FROM scored GROUP BY version, name ORDER BY version, name",
        params,
    ).fetchall()
    by_version: dict[str, list[tuple[str, int, int, float]]] = {}
    for version, name, n, units, mean in scores:
        by_version.setdefault(str(version), []).append((str(name), int(n), int(units), float(mean)))
    totals = {str(r[0]): tuple(int(x or 0) for x in r[1:]) for r in rates}
    return totals, by_version
