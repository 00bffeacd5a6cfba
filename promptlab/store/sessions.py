"""A replayed conversation log's results summed per session (promptlab/data/conversations.py)."""

from __future__ import annotations

from promptlab.records.sessions import SessionMetrics
from promptlab.store.connection import Store
from promptlab.store.metrics import MetricsReads, completed_predicate
from promptlab.store.samples import SESSION_KEY

#: Each result of the run with its session (from its turn's row).
_TURNS = (
    "SELECT r.variant, r.idempotency_key AS key, json_extract_string(rr.row_values, "
    f"'$.{SESSION_KEY}') AS session, ({{done}}) AS ok, CASE WHEN r.status = 'succeeded' "
    "THEN r.latency_ms END AS lat FROM results r JOIN run_rows rr ON rr.run_id = r.run_id "
    "AND rr.row_index = r.row_index WHERE r.run_id = $run"
)


class SessionReads:
    def __init__(self, store: Store) -> None:
        self.store = store

    def per_variant(self, run_id: str) -> list[SessionMetrics]:
        """Per variant: sessions, those whose every turn completed, turns per session,
        a session's latency (its turns' summed) p50 and p90, and each scorer's mean of
        per-session means. Empty for a run that is not a replay."""
        with self.store.read() as cur:
            turns = _TURNS.format(done=completed_predicate(MetricsReads(self.store).columns(cur)))
            rows = cur.execute(
                f"WITH t AS ({turns}), s AS (SELECT variant, session, count(*) AS turns, "
                "bool_and(ok) AS complete, sum(lat) AS lat, count(lat) = count(*) AS timed "
                "FROM t WHERE session IS NOT NULL GROUP BY ALL) "
                "SELECT variant, count(*), count(*) FILTER (WHERE complete), avg(turns), "
                "quantile_cont(lat, 0.5) FILTER (WHERE timed), "
                "quantile_cont(lat, 0.9) FILTER (WHERE timed) FROM s GROUP BY variant "
                "ORDER BY variant",
                {"run": run_id},
            ).fetchall()
            scores = cur.execute(
                f"WITH t AS ({turns}), m AS (SELECT t.variant, t.session, c.scorer, "
                "avg(c.value) AS v FROM t JOIN scores c ON c.idempotency_key = t.key "
                "WHERE t.session IS NOT NULL AND c.value IS NOT NULL GROUP BY ALL) "
                "SELECT variant, scorer, avg(v) FROM m GROUP BY ALL ORDER BY 1, 2",
                {"run": run_id},
            ).fetchall()
        by_variant: dict[str, dict[str, float]] = {}
        for variant, scorer, mean in scores:
            by_variant.setdefault(variant, {})[scorer] = float(mean)
        return [
            SessionMetrics(r[0], int(r[1]), int(r[2]), float(r[3]), r[4], r[5],
                           by_variant.get(r[0], {}))
            for r in rows
        ]  # fmt: skip
