"""A run's items in DuckDB: planning, streaming pending ones, the batched writer, resume, cancel.

Every write the engine makes while a run executes goes through `ItemStore.write_batch`,
called by one writer at a time, so hundreds of attempts and results commit in one
transaction. Each planned item ends with exactly one row in `results`: the writer and
cancel only give one to items still pending or in flight.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import numpy as np

from promptlab.audit.redact import Redactor
from promptlab.errors import StoreError
from promptlab.records import FinalRow, PendingItem, PlannedChunk, WriteBatch
from promptlab.store.audit_append import append_events
from promptlab.store.connection import Store
from promptlab.store.item_batches import (
    ATTEMPT_COLUMNS,
    FINAL_COLUMNS,
    assignments_table,
    attempts_table,
    finals_table,
    redacted_batch,
    result_values,
    text_column,
    with_result_digests,
)

# A batch's masking, digests and tables are in item_batches.py; the engine and the
# benchmarks import redacted_batch (and the rest) from here.
__all__ = [
    "CANCEL_SLICE",
    "ItemStore",
    "redacted_batch",
    "result_values",
    "with_result_digests",
]

#: Items closed per transaction when a run is cancelled: bounded memory for huge runs.
#: One DuckDB row group, so each slice's results are written as whole row groups.
CANCEL_SLICE = 122_880
#: Tables holding a run's planned items and everything recorded about them.
_PLAN_TABLES = (
    "items",
    "run_rows",
    "results",
    "attempts",
    "assignments",
    "item_drift",
    "crosscheck_rounds",
)


class ItemStore:
    """Writes and reads of `run_rows`, `items`, `attempts` and `results` while runs execute."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: Heads (seq, hash) of the run chains this store last committed: only the
        #: engine's writer appends to a run's chain, and one process writes the file, so
        #: the next batch need not read them back (a new process reads them once).
        self._audit_heads: dict[str, tuple[int, str]] = {}

    # ---- planning ------------------------------------------------------------------

    def plan_items(self, run_id: str, chunks: Iterable[PlannedChunk]) -> int:
        """Store a run's planned chunks (their dataset rows and items); return the item count.

        The planner (promptlab/engine/plan/planner.py) decides which items exist; this only
        writes them. Each chunk commits on its own; `scheduled` is set once all are in.
        """
        total = 0
        for chunk in chunks:
            # NumPy columns, not Arrow: pyarrow imports pandas on its first array (about
            # 0.4 s), which would delay a run's first request; DuckDB scans a dict of
            # NumPy arrays as a table, and at least as fast.
            row_table = {
                "row_index": np.arange(
                    chunk.first_row, chunk.first_row + len(chunk.rows), dtype=np.int64
                ),
                "row_values": text_column(json.dumps(r, default=str) for r in chunk.rows),
            }
            planned = chunk.items
            item_table = {
                "key": text_column(i.key for i in planned),
                "seq": np.fromiter((i.seq for i in planned), np.int64, len(planned)),
                "row_index": np.fromiter((i.row_index for i in planned), np.int64, len(planned)),
                "variant_index": np.fromiter(
                    (i.variant_index for i in planned), np.int32, len(planned)
                ),
                "repeat": np.fromiter((i.repeat for i in planned), np.int32, len(planned)),
            }
            total += len(planned)
            self.store.reserve_items(len(planned))
            with self.store.transaction() as tx:
                tx.register("plan_rows", row_table)
                tx.register("plan_items", item_table)
                if chunk.assignments:
                    # In the same transaction as the items: a plan never lacks its record.
                    tx.register("plan_assignments", assignments_table(chunk.assignments))
                    tx.execute(
                        "INSERT INTO assignments SELECT ?, experiment, revision, unit_id, "
                        "row_index, variant, bucket, in_experiment FROM plan_assignments",
                        [run_id],
                    )
                tx.execute(
                    "INSERT INTO run_rows SELECT ?, row_index, row_values FROM plan_rows", [run_id]
                )
                tx.execute(
                    "INSERT INTO items SELECT key, ?, seq, row_index, variant_index, repeat, "
                    "'pending', NULL, 0, NULL FROM plan_items",
                    [run_id],
                )
                tx.execute(
                    "UPDATE runs SET total_items = ?, updated_at = ? WHERE run_id = ?",
                    [total, self.store.clock.now(), run_id],
                )
        return total

    def turn_answers(
        self, run_id: str, variant_index: int, repeat: int, first_row: int, rows: int
    ) -> dict[int, str]:
        """{row index: stored output} of the succeeded items of one variant and repeat
        among `rows` rows from `first_row`: a resumed session's earlier turns."""
        with self.store.read() as cur:
            found = cur.execute(
                "SELECT r.row_index, r.output_text FROM results r JOIN items i ON "
                "i.run_id = r.run_id AND i.idempotency_key = r.idempotency_key "
                "WHERE r.run_id = ? AND i.variant_index = ? AND r.repeat = ? AND r.row_index "
                "BETWEEN ? AND ? AND r.status = 'succeeded' AND r.output_text IS NOT NULL",
                [run_id, variant_index, repeat, first_row, first_row + rows - 1],
            ).fetchall()
        return {int(row): str(text) for row, text in found}

    def row_count(self, run_id: str) -> int:
        """Dataset rows the run copied when it was planned."""
        with self.store.read() as cur:
            found = cur.execute(
                "SELECT count(*) FROM run_rows WHERE run_id = ?", [run_id]
            ).fetchone()
        return int(found[0]) if found else 0

    def pending_chunk(
        self, run_id: str, after_seq: int, variant_indexes: Sequence[int], limit: int
    ) -> list[PendingItem]:
        """The next `limit` pending items after `after_seq` (in plan order), with their rows."""
        with self.store.read() as cur:
            items = cur.execute(
                "SELECT idempotency_key, seq, row_index, variant_index, repeat, attempts "
                "FROM items WHERE run_id = ? AND seq > ? AND status = 'pending' "
                "AND list_contains(?, variant_index) ORDER BY seq LIMIT ?",
                [run_id, after_seq, list(variant_indexes), limit],
            ).fetchall()
            if not items:
                return []
            low = min(r[2] for r in items)
            high = max(r[2] for r in items)
            rows = dict(
                cur.execute(
                    "SELECT row_index, row_values FROM run_rows "
                    "WHERE run_id = ? AND row_index BETWEEN ? AND ?",
                    [run_id, low, high],
                ).fetchall()
            )
        return [
            PendingItem(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(rows[r[2]])) for r in items
        ]

    def clear_plan(self, run_id: str) -> None:
        """Forget the run's planned items and everything recorded about them, to plan again.

        For a run whose planning never finished: its items are an unknown prefix.
        """
        with self.store.transaction() as tx:
            for table in _PLAN_TABLES:
                tx.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

    # ---- the writer ----------------------------------------------------------------

    def write_batch(self, batch: WriteBatch) -> None:
        """Commit dispatch marks, attempts and final rows in one transaction.

        Messages and outputs are redacted first: a server may echo the key it was sent.
        """
        redactor = Redactor.from_environ()
        batch = redacted_batch(batch, redactor)
        # The first final row per item wins, so the results insert and the items update
        # below cannot pick different rows for one item.
        first_finals: dict[str, FinalRow] = {}
        for final in batch.finals:
            first_finals.setdefault(final.key, final)
        finals = list(first_finals.values())
        # Each row's params as stored, made once: the results insert and the trace's hash
        # of the row both take this text.
        params = [json.dumps(dict(f.params)) for f in finals]
        finished = {f.key for f in finals}
        dispatched = [k for k in batch.dispatched if k not in finished]
        now = self.store.clock.now()
        # Before the transaction: a batch that fails and is retried (or written row by
        # row) keeps the hashes on its drafts.
        with_result_digests(batch.audit, finals, params)
        with self.store.transaction() as tx:
            if dispatched:
                tx.register("w_dispatched", {"key": text_column(dispatched)})
                tx.execute(
                    "UPDATE items SET status = 'in_flight', updated_at = ? FROM w_dispatched "
                    "WHERE items.idempotency_key = w_dispatched.key AND items.status = 'pending'",
                    [now],
                )
            if batch.attempts:
                tx.register("w_attempts", attempts_table(batch.attempts))
                tx.execute(f"INSERT INTO attempts SELECT {ATTEMPT_COLUMNS} FROM w_attempts")
            if finals:
                tx.register("w_finals", finals_table(finals, params))
                # Only items not yet final get a row: exactly one final row per item. An
                # answer that lands after its item was closed (cancelled) is kept as an
                # attempt only; the item keeps the state its one final row says.
                tx.execute(
                    f"INSERT INTO results SELECT {FINAL_COLUMNS} FROM w_finals AS f "
                    "SEMI JOIN items AS i ON i.idempotency_key = f.idempotency_key "
                    "AND i.status IN ('pending', 'in_flight')"
                )
                # Same condition, same transaction, items not yet updated: exactly the
                # items that just got their final row move to its state.
                tx.execute(
                    "UPDATE items SET status = f.status, error_kind = f.error_kind, "
                    "attempts = f.attempts, updated_at = f.finished_at FROM w_finals AS f "
                    "WHERE items.idempotency_key = f.idempotency_key "
                    "AND items.status IN ('pending', 'in_flight')"
                )
            # The trace of these rows, in their transaction: stored exactly when they are.
            heads = append_events(tx, batch.audit, redactor, self._audit_heads)
        # Only once committed: a rolled-back batch leaves the chains where they were.
        self._audit_heads.update(heads)

    def attach_result_digests(self, batch: WriteBatch) -> None:
        """Give the batch's result drafts the hash of their final row as it would be
        stored (redacted), without writing anything: for a batch written row by row."""
        finals = redacted_batch(batch, Redactor.from_environ()).finals
        with_result_digests(batch.audit, finals, [json.dumps(dict(f.params)) for f in finals])

    def ingest_spill(self, batch: WriteBatch) -> None:
        """Commit rows a writer spilled when the store could not take them.

        Like `write_batch`, but attempts already stored (a spill ingested before a crash)
        are skipped, so ingesting a file twice records nothing twice.
        """
        with self.store.read() as cur:
            keys = list({a.key for a in batch.attempts})
            known = set(
                cur.execute(
                    "SELECT idempotency_key, attempt FROM attempts "
                    "WHERE list_contains(?, idempotency_key)",
                    [keys],
                ).fetchall()
            )
            events = list({d.event_id for d in batch.audit})
            stored = {
                row[0]
                for row in cur.execute(
                    "SELECT event_id FROM audit_events WHERE list_contains(?, event_id)",
                    [events],
                ).fetchall()
            }
        fresh = [a for a in batch.attempts if (a.key, a.attempt) not in known]
        audit = [d for d in batch.audit if d.event_id not in stored]
        self.write_batch(WriteBatch(batch.dispatched, fresh, batch.finals, audit))

    # ---- resume and cancel ---------------------------------------------------------

    def reopen(self, run_id: str, retry_kinds: Sequence[str]) -> int:
        """Make an interrupted run resumable; return how many items were put back to pending.

        In-flight items (their process died) and cancelled items go back to pending, as do
        items that failed with one of `retry_kinds` (errors that stopped the whole run).
        Succeeded items are never touched.
        """
        kinds = list(retry_kinds)
        with self.store.transaction() as tx:
            reopened = tx.execute(
                "SELECT count(*) FROM items WHERE run_id = ? AND (status IN ('in_flight', "
                "'cancelled') OR (status = 'failed' AND list_contains(?, error_kind)))",
                [run_id, kinds],
            ).fetchone()
            tx.execute(
                "DELETE FROM results WHERE run_id = ? AND (status = 'cancelled' OR "
                "(status = 'failed' AND list_contains(?, error_kind)))",
                [run_id, kinds],
            )
            # Attempts recorded before a crash are not yet counted on the item: carry the
            # count over, so the resumed attempts are numbered after them.
            tx.execute(
                "UPDATE items SET status = 'pending', error_kind = NULL, updated_at = ?, "
                "attempts = greatest(items.attempts, coalesce((SELECT max(a.attempt) "
                "FROM attempts a WHERE a.idempotency_key = items.idempotency_key), 0)) "
                "WHERE run_id = ? AND (status IN ('in_flight', 'cancelled') OR "
                "(status = 'failed' AND list_contains(?, error_kind)))",
                [self.store.clock.now(), run_id, kinds],
            )
        return int(reopened[0]) if reopened else 0

    def cancel_open_items(self, run_id: str, reason: str) -> int:
        """Give every pending or in-flight item its final `cancelled` row; return the count.

        Works through the run in slices of CANCEL_SLICE items, one transaction each, so
        cancelling a million-item run does not hold a million-row transaction in memory.
        """
        reason = Redactor.from_environ()(reason)
        with self.store.read() as cur:
            bounds = cur.execute(
                "SELECT min(seq), max(seq) FROM items WHERE run_id = ? "
                "AND status IN ('pending', 'in_flight')",
                [run_id],
            ).fetchone()
        if bounds is None or bounds[0] is None:
            return 0
        total = 0
        for low in range(int(bounds[0]), int(bounds[1]) + 1, CANCEL_SLICE):
            total += self._cancel_slice(run_id, reason, low, low + CANCEL_SLICE - 1)
            self._checkpoint_if_quiet()
        return total

    def _checkpoint_if_quiet(self) -> None:
        """Fold a slice's updates into the file (DuckDB keeps them in memory until then),
        unless another write is under way: runs cancelled at once from several sessions
        each write, and a failed CHECKPOINT must not fail the cancel. DuckDB checkpoints
        on its own later."""
        try:
            with self.store.read() as cur:
                cur.execute("CHECKPOINT")
        except StoreError as exc:
            if "Cannot CHECKPOINT" not in str(exc):
                raise

    def _cancel_slice(self, run_id: str, reason: str, low: int, high: int) -> int:
        now = self.store.clock.now()
        where = "i.run_id = ? AND i.seq BETWEEN ? AND ? AND i.status IN ('pending', 'in_flight')"
        with self.store.transaction() as tx:
            count = tx.execute(
                f"SELECT count(*) FROM items i WHERE {where}", [run_id, low, high]
            ).fetchone()
            tx.execute(
                "INSERT INTO results (idempotency_key, run_id, seq, row_index, variant, repeat, "
                "status, error_kind, error_message, prompt_version_id, endpoint, model, params, "
                "attempts, finished_at) "
                "SELECT i.idempotency_key, i.run_id, i.seq, i.row_index, v.name, i.repeat, "
                "'cancelled', NULL, ?, v.prompt_version_id, v.endpoint, v.model, v.params, "
                "i.attempts, ? FROM items i JOIN run_variants v "
                f"ON v.run_id = i.run_id AND v.variant_index = i.variant_index WHERE {where}",
                [reason, now, run_id, low, high],
            )
            tx.execute(
                "UPDATE items SET status = 'cancelled', updated_at = ? "
                "WHERE run_id = ? AND seq BETWEEN ? AND ? AND status IN ('pending', 'in_flight')",
                [now, run_id, low, high],
            )
        return int(count[0]) if count else 0
