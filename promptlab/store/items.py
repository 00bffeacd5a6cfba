"""A run's items in DuckDB: planning, streaming pending ones, the batched writer, resume, cancel.

Every write the engine makes while a run executes goes through `ItemStore.write_batch`,
called by one writer at a time, so hundreds of attempts and results commit in one
transaction. Each planned item ends with exactly one row in `results`: the writer and
cancel only give one to items still pending or in flight.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from promptlab.audit.chain import AuditDraft, as_real, epoch_us, row_digest
from promptlab.audit.redact import Redactor
from promptlab.errors import StoreError
from promptlab.records import (
    AssignmentRecord,
    AttemptRow,
    FinalRow,
    PendingItem,
    PlannedChunk,
    WriteBatch,
)
from promptlab.store.audit import append_events
from promptlab.store.connection import Store

if TYPE_CHECKING:
    import pyarrow as pa

#: Items closed per transaction when a run is cancelled: bounded memory for huge runs.
#: One DuckDB row group, so each slice's results are written as whole row groups.
CANCEL_SLICE = 122_880
#: Tables holding a run's planned items and everything recorded about them.
_PLAN_TABLES = ("items", "run_rows", "results", "attempts", "assignments")


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

        The planner (promptlab/engine/planner.py) decides which items exist; this only
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
                "row_values": _text_column(json.dumps(r, default=str) for r in chunk.rows),
            }
            planned = chunk.items
            item_table = {
                "key": _text_column(i.key for i in planned),
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
                    tx.register("plan_assignments", _assignments_table(chunk.assignments))
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
                tx.register("w_dispatched", {"key": _text_column(dispatched)})
                tx.execute(
                    "UPDATE items SET status = 'in_flight', updated_at = ? FROM w_dispatched "
                    "WHERE items.idempotency_key = w_dispatched.key AND items.status = 'pending'",
                    [now],
                )
            if batch.attempts:
                tx.register("w_attempts", _attempts_table(batch.attempts))
                tx.execute("INSERT INTO attempts SELECT * FROM w_attempts")
            if finals:
                tx.register("w_finals", _finals_table(finals, params))
                # Only items not yet final get a row: exactly one final row per item. An
                # answer that lands after its item was closed (cancelled) is kept as an
                # attempt only; the item keeps the state its one final row says.
                tx.execute(
                    "INSERT INTO results SELECT f.* FROM w_finals AS f "
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


def result_values(row: FinalRow, params: str) -> tuple[Any, ...]:
    """A final row's RESULT_DIGEST_COLUMNS values as `results` stores them (`params` is
    its params' stored JSON text)."""
    return (
        row.key, row.run_id, row.status, row.error_kind, row.error_message,
        row.prompt_version_id, row.endpoint, row.model, row.variant, params,
        row.output_text, row.input_tokens, row.output_tokens, row.finish_reason,
        row.model_version, as_real(row.latency_ms), as_real(row.cost_usd), row.attempts,
        epoch_us(row.finished_at), row.check_status,
        _list_text(row.check_errors) if row.check_status else None,
        row.rule_status, _list_text(row.rule_errors) if row.rule_status else None,
    )  # fmt: skip


def _list_text(items: Sequence[str]) -> str:
    # Most results have no check or rule errors: skip the encoder for those.
    return json.dumps(list(items)) if items else "[]"


def with_result_digests(
    drafts: Sequence[AuditDraft], finals: Sequence[FinalRow], params: Sequence[str]
) -> Sequence[AuditDraft]:
    """Result events given the hash of the results row they describe (as stored: after
    redaction), so the trace view can tell an edited result (promptlab.audit.chain).

    Sets it on the drafts themselves (a retried batch sets the same again; a final row
    replaced before it could be stored is hashed again as replaced).
    """
    if not drafts:
        return drafts
    stored = {f.key: (f, p) for f, p in zip(finals, params, strict=True)}
    for draft in drafts:
        found = stored.get(draft.trace_id or "") if draft.kind == "result" else None
        if found is not None:
            digest = row_digest(result_values(*found))
            draft.payload = {**draft.payload, "result_sha256": digest}
    return drafts


def redacted_batch(batch: WriteBatch, redactor: Redactor) -> WriteBatch:
    """The batch with secrets masked; rows are copied only when something was masked."""
    attempts = [_masked(a, redactor, ("error_message",)) for a in batch.attempts]
    finals = [
        _masked_errors(_masked(f, redactor, ("error_message", "output_text")), redactor)
        for f in batch.finals
    ]
    return WriteBatch(
        dispatched=batch.dispatched, attempts=attempts, finals=finals, audit=batch.audit
    )


def _masked_errors(row: FinalRow, redactor: Redactor) -> FinalRow:
    # Check and rule errors quote the output ("'sk-...' is not of type 'integer'").
    if not row.check_errors and not row.rule_errors:
        return row
    checks = tuple(redactor(e) for e in row.check_errors)
    rules = tuple(redactor(e) for e in row.rule_errors)
    if (checks, rules) == (row.check_errors, row.rule_errors):
        return row
    return replace(row, check_errors=checks, rule_errors=rules)


def _masked(row: Any, redactor: Redactor, names: tuple[str, ...]) -> Any:
    changes = {}
    for name in names:
        text = getattr(row, name)
        if text:
            masked = redactor(text)
            if masked != text:
                changes[name] = masked
    return replace(row, **changes) if changes else row


def _assignments_table(rows: Sequence[AssignmentRecord]) -> dict[str, Any]:
    return {
        "experiment": _text_column(a.experiment for a in rows),
        "revision": np.fromiter((a.revision for a in rows), np.int32, len(rows)),
        "unit_id": _text_column(a.unit_id for a in rows),
        "row_index": np.fromiter((a.row_index for a in rows), np.int64, len(rows)),
        "variant": _text_column(a.variant for a in rows),
        "bucket": np.fromiter((a.bucket for a in rows), np.int32, len(rows)),
        "in_experiment": np.fromiter((a.in_experiment for a in rows), np.bool_, len(rows)),
    }


def _text_column(values: Iterable[str]) -> np.ndarray[Any, np.dtype[np.object_]]:
    """Python strings as a NumPy object array, which DuckDB reads as VARCHAR."""
    return np.array(list(values), dtype=object)


def _attempts_table(rows: Sequence[AttemptRow]) -> pa.Table:
    # Imported at the first batch, not when a run starts: see the note in plan_items.
    import pyarrow as pa

    utc_us = pa.timestamp("us", tz="UTC")
    return pa.table(
        {
            "idempotency_key": pa.array([r.key for r in rows]),
            "run_id": pa.array([r.run_id for r in rows]),
            "attempt": pa.array([r.attempt for r in rows], pa.int32()),
            "started_at": pa.array([r.started_at for r in rows], utc_us),
            "ended_at": pa.array([r.ended_at for r in rows], utc_us),
            "outcome": pa.array([r.outcome for r in rows]),
            "error_kind": pa.array([r.error_kind for r in rows], pa.string()),
            "http_status": pa.array([r.http_status for r in rows], pa.int32()),
            "error_message": pa.array([r.error_message for r in rows], pa.string()),
            "wait_ms": pa.array([r.wait_ms for r in rows], pa.float64()),
            "wait_reason": pa.array([r.wait_reason for r in rows], pa.string()),
            "retry_after_s": pa.array([r.retry_after_s for r in rows], pa.float64()),
            "latency_ms": pa.array([r.latency_ms for r in rows], pa.float64()),
            "reask": pa.array([r.reask for r in rows], pa.bool_()),
        }
    )


def _finals_table(rows: Sequence[FinalRow], params: Sequence[str]) -> pa.Table:
    # Imported at the first batch, not when a run starts: see the note in plan_items.
    import pyarrow as pa

    utc_us = pa.timestamp("us", tz="UTC")
    # Column order follows the `results` table, so `INSERT ... SELECT *` lines up.
    return pa.table(
        {
            "idempotency_key": pa.array([r.key for r in rows]),
            "run_id": pa.array([r.run_id for r in rows]),
            "seq": pa.array([r.seq for r in rows], pa.int64()),
            "row_index": pa.array([r.row_index for r in rows], pa.int64()),
            "variant": pa.array([r.variant for r in rows]),
            "repeat": pa.array([r.repeat for r in rows], pa.int32()),
            "status": pa.array([r.status for r in rows]),
            "error_kind": pa.array([r.error_kind for r in rows], pa.string()),
            "error_message": pa.array([r.error_message for r in rows], pa.string()),
            "prompt_version_id": pa.array([r.prompt_version_id for r in rows]),
            "endpoint": pa.array([r.endpoint for r in rows]),
            "model": pa.array([r.model for r in rows]),
            "params": pa.array(params, pa.string()),
            "output_text": pa.array([r.output_text for r in rows], pa.string()),
            "input_tokens": pa.array([r.input_tokens for r in rows], pa.int32()),
            "output_tokens": pa.array([r.output_tokens for r in rows], pa.int32()),
            "finish_reason": pa.array([r.finish_reason for r in rows], pa.string()),
            "model_version": pa.array([r.model_version for r in rows], pa.string()),
            "latency_ms": pa.array([r.latency_ms for r in rows], pa.float64()),
            "cost_usd": pa.array([r.cost_usd for r in rows], pa.float64()),
            "attempts": pa.array([r.attempts for r in rows], pa.int32()),
            "finished_at": pa.array([r.finished_at for r in rows], utc_us),
            "check_status": pa.array([r.check_status for r in rows], pa.string()),
            "check_errors": pa.array(
                [_list_text(r.check_errors) if r.check_status else None for r in rows],
                pa.string(),
            ),
            "rule_status": pa.array([r.rule_status for r in rows], pa.string()),
            "rule_errors": pa.array(
                [_list_text(r.rule_errors) if r.rule_status else None for r in rows],
                pa.string(),
            ),
            "token_entropy": pa.array([r.token_entropy for r in rows], pa.float64()),
            "shard_id": pa.array([r.shard_id for r in rows], pa.string()),
            "logprob_mean": pa.array([r.logprob_mean for r in rows], pa.float64()),
            "logprob_tokens": pa.array([r.logprob_tokens for r in rows], pa.int32()),
        }
    )
