"""Runs in DuckDB: planning items, streaming pending ones, batched writes, lifecycle.

Every write the engine makes goes through `RunStore.write_batch`, called by one writer
at a time, so a batch of hundreds of attempts and results commits in one transaction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from promptlab.errors import StoreError
from promptlab.redact import Redactor
from promptlab.store.connection import Store

#: Run lifecycle states, in order; the last three are final.
RUN_SUBMITTED = "submitted"
RUN_SCHEDULED = "scheduled"
RUN_RUNNING = "running"
RUN_COMPLETED = "completed"
RUN_FAILED = "failed"
RUN_CANCELLED = "cancelled"
RUN_FINAL_STATES = frozenset({RUN_COMPLETED, RUN_FAILED, RUN_CANCELLED})

#: Item states; the last three are final and each has exactly one row in `results`.
ITEM_PENDING = "pending"
ITEM_IN_FLIGHT = "in_flight"
ITEM_SUCCEEDED = "succeeded"
ITEM_FAILED = "failed"
ITEM_CANCELLED = "cancelled"
ITEM_FINAL_STATES = (ITEM_SUCCEEDED, ITEM_FAILED, ITEM_CANCELLED)

#: Rows per Arrow batch when planning: large enough to be fast, small enough to stay flat.
PLAN_CHUNK = 20_000
#: Items closed per transaction when a run is cancelled: bounded memory for huge runs.
#: One DuckDB row group, so each slice's results are written as whole row groups.
CANCEL_SLICE = 122_880
#: Hex digits of the idempotency key (128 bits): unique in practice, compact in the index.
KEY_HEX_DIGITS = 32

_TS = pa.timestamp("us", tz="UTC")


def idempotency_key(run_id: str, row_index: int, variant: str, repeat: int) -> str:
    """Hash of (run, dataset row, variant, repeat): the item's identity everywhere."""
    blob = f"{run_id}\x1f{row_index}\x1f{variant}\x1f{repeat}".encode()
    return hashlib.sha256(blob).hexdigest()[:KEY_HEX_DIGITS]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class FailureExample:
    """One failed item: which dataset row (0-based) and variant, and why."""

    row_index: int
    variant: str
    error_kind: str
    message: str


@dataclass(frozen=True)
class VariantRecord:
    """A run's variant as stored: enough to rebuild its request without the registry."""

    index: int
    name: str
    prompt_ref: str
    prompt_version_id: str
    endpoint: str
    model: str
    params: Mapping[str, Any]
    template: Mapping[str, Any]


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    name: str
    spec: Mapping[str, Any]
    status: str
    status_reason: str | None
    total_items: int
    submitted_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class PendingItem:
    """One planned item read back for dispatch, with its dataset row."""

    key: str
    seq: int
    row_index: int
    variant_index: int
    repeat: int
    attempts: int
    values: Mapping[str, Any]


@dataclass(frozen=True)
class AttemptRow:
    key: str
    run_id: str
    attempt: int
    started_at: datetime
    ended_at: datetime
    outcome: str  # "ok" or "error"
    error_kind: str | None
    http_status: int | None
    error_message: str | None
    wait_ms: float
    wait_reason: str | None
    retry_after_s: float | None
    latency_ms: float | None


@dataclass(frozen=True)
class FinalRow:
    """An item's one final row: succeeded, failed with a kind, or cancelled."""

    key: str
    run_id: str
    seq: int
    row_index: int
    variant: str
    repeat: int
    status: str
    prompt_version_id: str
    endpoint: str
    model: str
    params: Mapping[str, Any]
    attempts: int
    finished_at: datetime
    error_kind: str | None = None
    error_message: str | None = None
    output_text: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    model_version: str | None = None
    latency_ms: float | None = None
    cost_usd: float | None = None


@dataclass
class WriteBatch:
    """What the writer commits in one transaction."""

    dispatched: list[str] = field(default_factory=list)
    attempts: list[AttemptRow] = field(default_factory=list)
    finals: list[FinalRow] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.dispatched) + len(self.attempts) + len(self.finals)


_RUN_COLUMNS = (
    "run_id, name, spec, status, status_reason, total_items, submitted_at, scheduled_at, "
    "started_at, finished_at, updated_at"
)
_STATUS_TIMESTAMP = {
    RUN_SCHEDULED: "scheduled_at",
    RUN_RUNNING: "started_at",
    RUN_COMPLETED: "finished_at",
    RUN_FAILED: "finished_at",
    RUN_CANCELLED: "finished_at",
}


class RunStore:
    """Queries and writes for runs, items, attempts and results."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- runs ----------------------------------------------------------------------

    def create_run(
        self, run_id: str, name: str, spec: Mapping[str, Any], variants: Sequence[VariantRecord]
    ) -> None:
        now = utcnow()
        with self.store.transaction() as tx:
            tx.execute(
                f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, NULL, 0, ?, NULL, NULL, "
                "NULL, ?)",
                [run_id, name, json.dumps(spec), RUN_SUBMITTED, now, now],
            )
            tx.executemany(
                "INSERT INTO run_variants VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [
                        run_id,
                        v.index,
                        v.name,
                        v.prompt_ref,
                        v.prompt_version_id,
                        v.endpoint,
                        v.model,
                        json.dumps(dict(v.params)),
                        json.dumps(dict(v.template)),
                    ]
                    for v in variants
                ],
            )
            _add_event(tx, run_id, RUN_SUBMITTED, None, now)

    def set_status(self, run_id: str, status: str, reason: str | None = None) -> None:
        """Move the run to `status`, stamping its timestamp and recording the event."""
        now = utcnow()
        reason = Redactor.from_environ().optional(reason)
        column = _STATUS_TIMESTAMP.get(status)
        stamp = f", {column} = ?" if column else ""
        # A resumed run starts again: its old finish time no longer applies.
        clear = ", finished_at = NULL" if status in (RUN_SCHEDULED, RUN_RUNNING) else ""
        with self.store.transaction() as tx:
            tx.execute(
                f"UPDATE runs SET status = ?, status_reason = ?, updated_at = ?{stamp}{clear} "
                "WHERE run_id = ?",
                [status, reason, now, *([now] if column else []), run_id],
            )
            _add_event(tx, run_id, status, reason, now)

    def get_run(self, run_id: str) -> RunRecord:
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id]
            ).fetchone()
        if row is None:
            raise StoreError(f"no run with id {run_id!r}")
        return _run_from_row(row)

    def list_runs(self, limit: int = 100) -> list[RunRecord]:
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY submitted_at DESC LIMIT ?", [limit]
            ).fetchall()
        return [_run_from_row(r) for r in rows]

    def events(self, run_id: str) -> list[tuple[str, str | None, datetime]]:
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT status, reason, changed_at FROM run_events WHERE run_id = ? ORDER BY seq",
                [run_id],
            ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def variants(self, run_id: str) -> list[VariantRecord]:
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT variant_index, name, prompt_ref, prompt_version_id, endpoint, model, "
                "params, template FROM run_variants WHERE run_id = ? ORDER BY variant_index",
                [run_id],
            ).fetchall()
        return [
            VariantRecord(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), json.loads(r[7]))
            for r in rows
        ]

    # ---- planning ------------------------------------------------------------------

    def plan_items(
        self,
        run_id: str,
        rows: Iterable[Mapping[str, Any]],
        variant_names: Sequence[str],
        repeats: int,
    ) -> int:
        """Store dataset rows and one item per (row, variant, repeat); return the item count.

        Rows are consumed in chunks, so a large dataset never sits in memory at once.
        Each chunk commits on its own; `scheduled` is only set once all are in.
        """
        total = 0
        for chunk_start, chunk in _chunks(rows, PLAN_CHUNK):
            row_indexes = list(range(chunk_start, chunk_start + len(chunk)))
            row_table = pa.table(
                {
                    "row_index": pa.array(row_indexes, pa.int64()),
                    "row_values": pa.array([json.dumps(r, default=str) for r in chunk]),
                }
            )
            keys: list[str] = []
            seqs: list[int] = []
            item_rows: list[int] = []
            item_variants: list[int] = []
            item_repeats: list[int] = []
            for row_index in row_indexes:
                for variant_index, variant in enumerate(variant_names):
                    for repeat in range(repeats):
                        keys.append(idempotency_key(run_id, row_index, variant, repeat))
                        seqs.append(total)
                        item_rows.append(row_index)
                        item_variants.append(variant_index)
                        item_repeats.append(repeat)
                        total += 1
            item_table = pa.table(
                {
                    "key": pa.array(keys),
                    "seq": pa.array(seqs, pa.int64()),
                    "row_index": pa.array(item_rows, pa.int64()),
                    "variant_index": pa.array(item_variants, pa.int32()),
                    "repeat": pa.array(item_repeats, pa.int32()),
                }
            )
            self.store.reserve_items(len(keys))
            with self.store.transaction() as tx:
                tx.register("plan_rows", row_table)
                tx.register("plan_items", item_table)
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
                    [total, utcnow(), run_id],
                )
        return total

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

    # ---- the writer ----------------------------------------------------------------

    def write_batch(self, batch: WriteBatch) -> None:
        """Commit dispatch marks, attempts and final rows in one transaction.

        Messages and outputs are redacted first: a server may echo the key it was sent.
        """
        batch = _redacted(batch, Redactor.from_environ())
        # The first final row per item wins, so the results insert and the items update
        # below cannot pick different rows for one item.
        first_finals: dict[str, FinalRow] = {}
        for final in batch.finals:
            first_finals.setdefault(final.key, final)
        finals = list(first_finals.values())
        finished = {f.key for f in finals}
        dispatched = [k for k in batch.dispatched if k not in finished]
        now = utcnow()
        with self.store.transaction() as tx:
            if dispatched:
                tx.register("w_dispatched", pa.table({"key": pa.array(dispatched)}))
                tx.execute(
                    "UPDATE items SET status = 'in_flight', updated_at = ? FROM w_dispatched "
                    "WHERE items.idempotency_key = w_dispatched.key AND items.status = 'pending'",
                    [now],
                )
            if batch.attempts:
                tx.register("w_attempts", _attempts_table(batch.attempts))
                tx.execute("INSERT INTO attempts SELECT * FROM w_attempts")
            if finals:
                tx.register("w_finals", _finals_table(finals))
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
        fresh = [a for a in batch.attempts if (a.key, a.attempt) not in known]
        self.write_batch(WriteBatch(batch.dispatched, fresh, batch.finals))

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
                [utcnow(), run_id, kinds],
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
            # Fold the slice's updates into the file: DuckDB keeps them in memory until then.
            with self.store.read() as cur:
                cur.execute("CHECKPOINT")
        return total

    def _cancel_slice(self, run_id: str, reason: str, low: int, high: int) -> int:
        now = utcnow()
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

    # ---- reading -------------------------------------------------------------------

    def item_counts(self, run_id: str) -> dict[str, int]:
        """Items per state (every state present, zero when none)."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT status, count(*) FROM items WHERE run_id = ? GROUP BY status", [run_id]
            ).fetchall()
        counts = dict.fromkeys((ITEM_PENDING, ITEM_IN_FLIGHT, *ITEM_FINAL_STATES), 0)
        counts.update({r[0]: int(r[1]) for r in rows})
        return counts

    def failure_kinds(self, run_id: str) -> dict[str, int]:
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT error_kind, count(*) FROM results WHERE run_id = ? AND status = 'failed' "
                "GROUP BY error_kind ORDER BY 2 DESC",
                [run_id],
            ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def failure_examples(self, run_id: str, limit: int = 10) -> list[FailureExample]:
        """The first failed items of a run, in dataset order, with their messages."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT row_index, variant, error_kind, error_message FROM results "
                "WHERE run_id = ? AND status = 'failed' ORDER BY seq LIMIT ?",
                [run_id, limit],
            ).fetchall()
        return [FailureExample(int(r[0]), r[1], str(r[2]), r[3] or "") for r in rows]

    def summary(self, run_id: str) -> dict[str, Any]:
        """Totals over the run's final rows: tokens, cost, latency percentiles."""
        with self.store.read() as cur:
            row = cur.execute(
                "SELECT count(*), sum(input_tokens), sum(output_tokens), sum(cost_usd), "
                "quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95) "
                "FROM results WHERE run_id = ? AND status = 'succeeded'",
                [run_id],
            ).fetchone()
            attempts = cur.execute(
                "SELECT count(*), count(*) FILTER (WHERE error_kind = 'rate_limit') "
                "FROM attempts WHERE run_id = ?",
                [run_id],
            ).fetchone()
        assert row is not None and attempts is not None
        return {
            "succeeded": int(row[0]),
            "input_tokens": int(row[1] or 0),
            "output_tokens": int(row[2] or 0),
            "cost_usd": float(row[3] or 0.0),
            "latency_p50_ms": row[4],
            "latency_p95_ms": row[5],
            "attempts": int(attempts[0]),
            "rate_limited_attempts": int(attempts[1]),
        }


def _add_event(tx: Any, run_id: str, status: str, reason: str | None, at: datetime) -> None:
    tx.execute(
        "INSERT INTO run_events SELECT ?, coalesce(max(seq), 0) + 1, ?, ?, ? "
        "FROM run_events WHERE run_id = ?",
        [run_id, status, reason, at, run_id],
    )


def _redacted(batch: WriteBatch, redactor: Redactor) -> WriteBatch:
    """The batch with secrets masked; rows are copied only when something was masked."""
    attempts = [_masked(a, redactor, ("error_message",)) for a in batch.attempts]
    finals = [_masked(f, redactor, ("error_message", "output_text")) for f in batch.finals]
    return WriteBatch(dispatched=batch.dispatched, attempts=attempts, finals=finals)


def _masked(row: Any, redactor: Redactor, names: tuple[str, ...]) -> Any:
    changes = {}
    for name in names:
        text = getattr(row, name)
        if text:
            masked = redactor(text)
            if masked != text:
                changes[name] = masked
    return replace(row, **changes) if changes else row


def _run_from_row(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(
        run_id=row[0],
        name=row[1],
        spec=json.loads(row[2]),
        status=row[3],
        status_reason=row[4],
        total_items=int(row[5]),
        submitted_at=row[6],
        scheduled_at=row[7],
        started_at=row[8],
        finished_at=row[9],
        updated_at=row[10],
    )


def _chunks(
    rows: Iterable[Mapping[str, Any]], size: int
) -> Iterator[tuple[int, list[Mapping[str, Any]]]]:
    chunk: list[Mapping[str, Any]] = []
    start = 0
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield start, chunk
            start += len(chunk)
            chunk = []
    if chunk:
        yield start, chunk


def _attempts_table(rows: Sequence[AttemptRow]) -> pa.Table:
    return pa.table(
        {
            "idempotency_key": pa.array([r.key for r in rows]),
            "run_id": pa.array([r.run_id for r in rows]),
            "attempt": pa.array([r.attempt for r in rows], pa.int32()),
            "started_at": pa.array([r.started_at for r in rows], _TS),
            "ended_at": pa.array([r.ended_at for r in rows], _TS),
            "outcome": pa.array([r.outcome for r in rows]),
            "error_kind": pa.array([r.error_kind for r in rows], pa.string()),
            "http_status": pa.array([r.http_status for r in rows], pa.int32()),
            "error_message": pa.array([r.error_message for r in rows], pa.string()),
            "wait_ms": pa.array([r.wait_ms for r in rows], pa.float64()),
            "wait_reason": pa.array([r.wait_reason for r in rows], pa.string()),
            "retry_after_s": pa.array([r.retry_after_s for r in rows], pa.float64()),
            "latency_ms": pa.array([r.latency_ms for r in rows], pa.float64()),
        }
    )


def _finals_table(rows: Sequence[FinalRow]) -> pa.Table:
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
            "params": pa.array([json.dumps(dict(r.params)) for r in rows]),
            "output_text": pa.array([r.output_text for r in rows], pa.string()),
            "input_tokens": pa.array([r.input_tokens for r in rows], pa.int32()),
            "output_tokens": pa.array([r.output_tokens for r in rows], pa.int32()),
            "finish_reason": pa.array([r.finish_reason for r in rows], pa.string()),
            "model_version": pa.array([r.model_version for r in rows], pa.string()),
            "latency_ms": pa.array([r.latency_ms for r in rows], pa.float64()),
            "cost_usd": pa.array([r.cost_usd for r in rows], pa.float64()),
            "attempts": pa.array([r.attempts for r in rows], pa.int32()),
            "finished_at": pa.array([r.finished_at for r in rows], _TS),
        }
    )
