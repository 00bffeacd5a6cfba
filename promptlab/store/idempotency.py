"""A server's answers by idempotency key, kept in the database (migration 0023): a
retry that comes after the server restarted finds the first answer as one that came
before it would. Each key is its caller's and its route's; a key older than KEEP_S is
forgotten (and pruned as new ones are kept)."""

from __future__ import annotations

from datetime import timedelta

from promptlab.store.connection import Store

#: How long an answer is kept for a retry: far longer than any client retries.
KEEP_S = 7 * 24 * 3600
#: Longest key kept (a client's own text: longer is refused by the route first).
MAX_KEY_CHARS = 200


class IdempotencyKeys:
    """The table's reads and writes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def find(self, caller: str, route: str, key: str) -> tuple[str, str] | None:
        """(body SHA-256, answer as the route encoded it) of a key kept, or None."""
        since = self.store.clock.now() - timedelta(seconds=KEEP_S)
        with self.store.read() as cur:
            row = cur.execute(
                "SELECT body_sha256, answer FROM idempotency_keys WHERE caller = ? AND "
                "route = ? AND key = ? AND created_at >= ?",
                [caller, route, key, since],
            ).fetchone()
        return (str(row[0]), str(row[1])) if row else None

    def keep(self, caller: str, route: str, key: str, digest: str, answer: str) -> None:
        """Keep a first answer (replacing one older than KEEP_S), pruning old keys."""
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            tx.execute(
                "DELETE FROM idempotency_keys WHERE created_at < ?",
                [now - timedelta(seconds=KEEP_S)],
            )
            tx.execute(
                "INSERT OR REPLACE INTO idempotency_keys VALUES (?, ?, ?, ?, ?, ?)",
                [caller, route, key, digest, answer, now],
            )
