"""A replayed conversation log's results summed per session (promptlab/conversations/replay.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from promptlab.records.sessions import SESSION_KEY, SessionMetrics, SessionTurn
from promptlab.store.connection import Store
from promptlab.store.metrics import MetricsReads, completed_predicate

if TYPE_CHECKING:
    import duckdb

#: Each result of the run with its session (from its turn's row).
_TURNS = (
    "SELECT r.variant, r.idempotency_key AS key, json_extract_string(rr.row_values, "
    f"'$.{SESSION_KEY}') AS session, ({{done}}) AS ok, CASE WHEN r.status = 'succeeded' "
    "THEN r.latency_ms END AS lat FROM results r JOIN run_rows rr ON rr.run_id = r.run_id "
    "AND rr.row_index = r.row_index WHERE r.run_id = $run"
)


def turn_rows(
    cur: duckdb.DuckDBPyConnection, run_id: str, first_row: int, last_row: int
) -> list[dict[str, Any]]:
    """The run's rows from `first_row` to `last_row` (both included), in order."""
    found = cur.execute(
        "SELECT row_values FROM run_rows WHERE run_id = ? AND row_index BETWEEN ? AND ? "
        "ORDER BY row_index",
        [run_id, first_row, last_row],
    ).fetchall()
    return [json.loads(r[0]) for r in found]


def row_with_history(
    cur: duckdb.DuckDBPyConnection, run_id: str, row_index: int, values: dict[str, Any]
) -> dict[str, Any]:
    """A replayed turn's row with the history it was sent with put together from its
    session's earlier rows (conversations/replay.py); any other row as it is."""
    # Imported here: conversations/replay.py reads the store's dataset tables.
    from promptlab.conversations.replay import is_turn_row, turn_of, with_history

    if not is_turn_row(values):
        return values
    turn = turn_of(values)
    earlier = turn_rows(cur, run_id, row_index - turn, row_index - 1) if turn else []
    return with_history(values, earlier)


class SessionReads:
    def __init__(self, store: Store) -> None:
        self.store = store

    def turn_rows(self, run_id: str, first_row: int, last_row: int) -> list[dict[str, Any]]:
        """The run's rows from `first_row` to `last_row`: a session's earlier turns."""
        with self.store.read() as cur:
            return turn_rows(cur, run_id, first_row, last_row)

    def of_item(self, run_id: str, key: str) -> tuple[str, str, int] | None:
        """(session, variant, repeat) of a replayed turn's item; None for any other."""
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT json_extract_string(rr.row_values, '$.{SESSION_KEY}'), i.variant_index, "
                "i.repeat FROM items i JOIN run_rows rr ON rr.run_id = i.run_id AND "
                "rr.row_index = i.row_index WHERE i.run_id = ? AND i.idempotency_key = ?",
                [run_id, key],
            ).fetchone()
            if row is None or row[0] is None:
                return None
            name = cur.execute(
                "SELECT name FROM run_variants WHERE run_id = ? AND variant_index = ?",
                [run_id, row[1]],
            ).fetchone()
        return (str(row[0]), str(name[0]), int(row[2])) if name else None

    def turns(
        self, run_id: str, session: str, variant: str, repeat: int, content: str | None
    ) -> list[SessionTurn]:
        """The session's finished turns of one variant and repeat, in order; the user's
        message read from the `content` column of each turn's row."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT r.idempotency_key, r.row_index, r.status, r.attempts, rr.row_values, "
                "r.output_text, r.error_message, s.seq_no, r.shard_id FROM results r JOIN "
                "run_rows rr ON rr.run_id = r.run_id AND rr.row_index = r.row_index LEFT JOIN "
                "shards s ON s.shard_id = r.shard_id WHERE r.run_id = ? "
                "AND r.variant = ? AND r.repeat = ? AND json_extract_string(rr.row_values, "
                f"'$.{SESSION_KEY}') = ? ORDER BY r.row_index",
                [run_id, variant, repeat, session],
            ).fetchall()
        turns = []
        for key, row_index, status, attempts, values, output, error, seq, shard in rows:
            user = json.loads(values).get(content) if content else None
            text = None if user is None else str(user)
            turns.append(
                SessionTurn(
                    key, int(row_index), status, int(attempts), text, output, error, seq, shard
                )
            )
        return turns

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
            SessionMetrics(
                r[0], int(r[1]), int(r[2]), float(r[3]), r[4], r[5], by_variant.get(r[0], {})
            )
            for r in rows
        ]
