"""The provider-batch executor's ledger (providers/batches/ledger.py): chunks, their
lines and batch ids, committed before the executor waits on them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from promptlab.audit.redact import Redactor
from promptlab.providers.batches.ledger import ChunkRecord, ChunkView, StoredChunk
from promptlab.store.connection import Store

#: Chunks older than this are not polled again on a resume: both providers end a batch
#: within 24 hours and keep its results for 29 days or more; two days covers a slow one.
OPEN_FOR_S = 2 * 24 * 3600


def _ts(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _lines(raw: str) -> tuple[tuple[str, str, int], ...]:
    return tuple((str(c), str(k), int(a)) for c, k, a in json.loads(raw))


class BatchLedgerStore:
    """The ledger in the store's `provider_batches` table."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def begin(self, chunk: ChunkRecord) -> None:
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            tx.execute(
                "INSERT INTO provider_batches (chunk_id, run_id, endpoint, kind, state, "
                "lines, line_count, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, 'submitting', ?, ?, ?, ?)",
                [
                    chunk.chunk_id,
                    chunk.run_id,
                    chunk.endpoint,
                    chunk.kind,
                    json.dumps(chunk.lines),
                    len(chunk.lines),
                    _ts(chunk.created_at),
                    now,
                ],
            )

    def submitted(self, chunk_id: str, batch_id: str, state: str, expires_at: float | None) -> None:
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            tx.execute(
                "UPDATE provider_batches SET batch_id = ?, state = ?, submitted_at = ?, "
                "expires_at = ?, updated_at = ? WHERE chunk_id = ?",
                [batch_id, state, now, _ts(expires_at), now, chunk_id],
            )

    def update(
        self, chunk_id: str, state: str, succeeded: int, failed: int, message: str | None
    ) -> None:
        """The batch's state and counts, and the provider's reason (redacted, like every
        stored message)."""
        with self.store.transaction() as tx:
            tx.execute(
                "UPDATE provider_batches SET state = ?, succeeded = ?, failed = ?, "
                "message = ?, updated_at = ? WHERE chunk_id = ?",
                [
                    state,
                    succeeded,
                    failed,
                    Redactor.from_environ().optional(message),
                    self.store.clock.now(),
                    chunk_id,
                ],
            )

    def collected(self, chunk_id: str) -> None:
        with self.store.transaction() as tx:
            tx.execute(
                "UPDATE provider_batches SET collected = true, updated_at = ? WHERE chunk_id = ?",
                [self.store.clock.now(), chunk_id],
            )

    def open_chunks(self, endpoint: str) -> Sequence[StoredChunk]:
        """Chunks of this endpoint whose results were not all handed over, newest last."""
        since = self.store.clock.now().timestamp() - OPEN_FOR_S
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT chunk_id, run_id, batch_id, state, created_at, submitted_at, lines "
                "FROM provider_batches WHERE endpoint = ? AND NOT collected "
                "AND state <> 'refused' AND created_at >= ? ORDER BY created_at",
                [endpoint, _ts(since)],
            ).fetchall()
        return [
            StoredChunk(r[0], r[1], r[2], r[3], r[4].timestamp(), _epoch(r[5]), _lines(r[6]))
            for r in rows
        ]

    def for_run(self, run_id: str) -> Sequence[ChunkView]:
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT chunk_id, endpoint, batch_id, state, line_count, succeeded, failed, "
                "submitted_at, updated_at, expires_at, message FROM provider_batches "
                "WHERE run_id = ? ORDER BY created_at",
                [run_id],
            ).fetchall()
        return [
            ChunkView(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                _epoch(r[7]),
                r[8].timestamp(),
                _epoch(r[9]),
                r[10],
            )
            for r in rows
        ]
