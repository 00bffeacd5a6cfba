"""Stored context shards (promptlab/conversations/shards.py): one row per shard of a replayed
session, per run, variant and repeat, with the summary it carries. A shard lives until
its `expires_at` (the run's `shards: {ttl}`): reads leave expired rows out and `prune`
deletes them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from promptlab.records.sessions import ShardRecord
from promptlab.store.connection import Store

_COLUMNS = (
    "shard_id, run_id, session_id, variant, repeat, seq_no, is_final, first_message, "
    "last_message, tokens, cut, summary, summary_version_id, summary_tokens, "
    "summary_cost_usd, created_at, expires_at"
)


class ShardStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def add(self, record: ShardRecord) -> None:
        """Store a shard (see `add_many`)."""
        self.add_many([record])

    def add_many(self, records: Sequence[ShardRecord]) -> None:
        """Store shards, in one transaction. Stored again, a shard grows to a later last
        message, lives on from now (a shard in use does not expire), and takes the
        summary given (a summary is made again only when the one stored expired); the
        session's shard of the highest seq_no is final."""
        with self.store.transaction() as tx:
            for record in records:
                tx.execute(
                    f"INSERT INTO shards ({_COLUMNS}) VALUES "
                    "(?, ?, ?, ?, ?, ?, false, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (shard_id) DO UPDATE SET "
                    "last_message = greatest(shards.last_message, excluded.last_message), "
                    "tokens = CASE WHEN excluded.last_message > shards.last_message "
                    "THEN excluded.tokens ELSE shards.tokens END, "
                    "expires_at = greatest(shards.expires_at, excluded.expires_at), "
                    "summary = coalesce(excluded.summary, shards.summary), "
                    "summary_version_id = coalesce(excluded.summary_version_id, "
                    "shards.summary_version_id), "
                    "summary_tokens = coalesce(excluded.summary_tokens, shards.summary_tokens), "
                    "summary_cost_usd = coalesce(excluded.summary_cost_usd, "
                    "shards.summary_cost_usd)",
                    [
                        record.shard_id,
                        record.run_id,
                        record.session_id,
                        record.variant,
                        record.repeat,
                        record.seq_no,
                        record.first_message,
                        record.last_message,
                        record.tokens,
                        record.cut,
                        record.summary,
                        record.summary_version_id,
                        record.summary_tokens,
                        record.summary_cost_usd,
                        record.created_at,
                        record.expires_at,
                    ],
                )
            chains = {(r.run_id, r.session_id, r.variant, r.repeat) for r in records}
            for chain in sorted(chains):
                tx.execute(
                    "UPDATE shards SET is_final = (seq_no = (SELECT max(seq_no) FROM shards s "
                    "WHERE s.run_id = shards.run_id AND s.session_id = shards.session_id AND "
                    "s.variant = shards.variant AND s.repeat = shards.repeat)) "
                    "WHERE run_id = ? AND session_id = ? AND variant = ? AND repeat = ?",
                    list(chain),
                )

    def get(self, shard_id: str, now: datetime) -> ShardRecord | None:
        """The shard, unless it is not stored or has expired."""
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_COLUMNS} FROM shards WHERE shard_id = ? AND expires_at > ?",
                [shard_id, now],
            ).fetchone()
        return ShardRecord(*row) if row else None

    def of_run(self, run_id: str, now: datetime, session: str | None = None) -> list[ShardRecord]:
        """The run's live shards (of one session), by session, variant, repeat, seq_no."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM shards WHERE run_id = ? AND expires_at > ? "
                "AND (? IS NULL OR session_id = ?) ORDER BY session_id, variant, repeat, seq_no",
                [run_id, now, session, session],
            ).fetchall()
        return [ShardRecord(*r) for r in rows]

    def prune(self, now: datetime) -> int:
        """Delete every expired shard; how many were."""
        with self.store.transaction() as tx:
            found = tx.execute(
                "SELECT count(*) FROM shards WHERE expires_at <= ?", [now]
            ).fetchone()
            tx.execute("DELETE FROM shards WHERE expires_at <= ?", [now])
        return int(found[0]) if found else 0
