"""A write batch made ready to store: secrets masked, result events given the hash of
the row they describe, and rows as the columns DuckDB scans (NumPy, masked where NULL)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from promptlab.audit.chain import AuditDraft, as_real, epoch_us, row_digest
from promptlab.audit.redact import Redactor
from promptlab.records import AssignmentRecord, AttemptRow, FinalRow, WriteBatch


def result_values(row: FinalRow, params: str) -> tuple[Any, ...]:
    """A final row's RESULT_DIGEST_COLUMNS values as `results` stores them (`params` is
    its params' stored JSON text)."""
    return (
        row.key,
        row.run_id,
        row.status,
        row.error_kind,
        row.error_message,
        row.prompt_version_id,
        row.endpoint,
        row.model,
        row.variant,
        params,
        row.output_text,
        row.input_tokens,
        row.output_tokens,
        row.finish_reason,
        row.model_version,
        as_real(row.latency_ms),
        as_real(row.cost_usd),
        row.attempts,
        epoch_us(row.finished_at),
        row.check_status,
        list_text(row.check_errors) if row.check_status else None,
        row.rule_status,
        list_text(row.rule_errors) if row.rule_status else None,
    )


def list_text(items: Sequence[str]) -> str:
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


def assignments_table(rows: Sequence[AssignmentRecord]) -> dict[str, Any]:
    return {
        "experiment": text_column(a.experiment for a in rows),
        "revision": np.fromiter((a.revision for a in rows), np.int32, len(rows)),
        "unit_id": text_column(a.unit_id for a in rows),
        "row_index": np.fromiter((a.row_index for a in rows), np.int64, len(rows)),
        "variant": text_column(a.variant for a in rows),
        "bucket": np.fromiter((a.bucket for a in rows), np.int32, len(rows)),
        "in_experiment": np.fromiter((a.in_experiment for a in rows), np.bool_, len(rows)),
    }


def text_column(values: Iterable[str | None]) -> np.ndarray[Any, np.dtype[np.object_]]:
    """Python strings as a NumPy object array, which DuckDB reads as VARCHAR (None as NULL)."""
    return np.array(list(values), dtype=object)


def int_column(values: Sequence[int | None], dtype: type[np.integer[Any]]) -> np.ndarray[Any, Any]:
    """Whole numbers as DuckDB scans them; None is NULL (a masked entry)."""
    count = len(values)
    if not any(v is None for v in values):
        return np.fromiter(values, dtype, count)
    data = np.fromiter((0 if v is None else v for v in values), dtype, count)
    return np.ma.masked_array(data, mask=[v is None for v in values])


def real_column(values: Sequence[float | None]) -> np.ndarray[Any, Any]:
    """Floats as DOUBLE; None is NULL (a masked entry)."""
    count = len(values)
    if not any(v is None for v in values):
        return np.fromiter(values, np.float64, count)
    data = np.fromiter((0.0 if v is None else v for v in values), np.float64, count)
    return np.ma.masked_array(data, mask=[v is None for v in values])


def bool_column(values: Sequence[bool | None]) -> np.ndarray[Any, Any]:
    """Booleans; None is NULL (a masked entry)."""
    count = len(values)
    if not any(v is None for v in values):
        return np.fromiter(values, np.bool_, count)
    data = np.fromiter((bool(v) for v in values), np.bool_, count)
    return np.ma.masked_array(data, mask=[v is None for v in values])


def time_column(values: Iterable[datetime]) -> np.ndarray[Any, Any]:
    """Times as exact UTC microseconds (datetime64[us], which DuckDB scans as a TIMESTAMP):
    the INSERT stores them with `timezone('UTC', ...)` as TIMESTAMPTZ, whatever the
    session's time zone. A naive time is taken as UTC."""
    micros = [epoch_us(t if t.tzinfo is not None else t.replace(tzinfo=UTC)) for t in values]
    return np.array(micros, dtype=np.int64).view("datetime64[us]")


# Rows as NumPy columns, not Arrow: pyarrow imports pandas on its first array (0.4 s to
# over a second of a run's CPU), and DuckDB scans a dict of NumPy arrays (masked where
# NULL) as a table at least as fast. The INSERTs name the columns in the table's order.

Columns = dict[str, np.ndarray[Any, Any]]

#: `INSERT INTO attempts` from a registered attempts_table.
ATTEMPT_COLUMNS = (
    "idempotency_key, run_id, attempt, timezone('UTC', started_at), "
    "timezone('UTC', ended_at), outcome, error_kind, http_status, error_message, wait_ms, "
    "wait_reason, retry_after_s, latency_ms, reask"
)


def attempts_table(rows: Sequence[AttemptRow]) -> Columns:
    return {
        "idempotency_key": text_column(r.key for r in rows),
        "run_id": text_column(r.run_id for r in rows),
        "attempt": int_column([r.attempt for r in rows], np.int32),
        "started_at": time_column(r.started_at for r in rows),
        "ended_at": time_column(r.ended_at for r in rows),
        "outcome": text_column(r.outcome for r in rows),
        "error_kind": text_column(r.error_kind for r in rows),
        "http_status": int_column([r.http_status for r in rows], np.int32),
        "error_message": text_column(r.error_message for r in rows),
        "wait_ms": real_column([r.wait_ms for r in rows]),
        "wait_reason": text_column(r.wait_reason for r in rows),
        "retry_after_s": real_column([r.retry_after_s for r in rows]),
        "latency_ms": real_column([r.latency_ms for r in rows]),
        "reask": bool_column([r.reask for r in rows]),
    }


#: `INSERT INTO results` from a registered finals_table (as `f`), in the table's order.
FINAL_COLUMNS = ", ".join(
    f"timezone('UTC', f.{name})" if name == "finished_at" else f"f.{name}"
    for name in (
        "idempotency_key",
        "run_id",
        "seq",
        "row_index",
        "variant",
        "repeat",
        "status",
        "error_kind",
        "error_message",
        "prompt_version_id",
        "endpoint",
        "model",
        "params",
        "output_text",
        "input_tokens",
        "output_tokens",
        "finish_reason",
        "model_version",
        "latency_ms",
        "cost_usd",
        "attempts",
        "finished_at",
        "check_status",
        "check_errors",
        "rule_status",
        "rule_errors",
        "token_entropy",
        "shard_id",
        "logprob_mean",
        "logprob_tokens",
        "cache_hit",
    )
)


def finals_table(rows: Sequence[FinalRow], params: Sequence[str]) -> Columns:
    return {
        "idempotency_key": text_column(r.key for r in rows),
        "run_id": text_column(r.run_id for r in rows),
        "seq": int_column([r.seq for r in rows], np.int64),
        "row_index": int_column([r.row_index for r in rows], np.int64),
        "variant": text_column(r.variant for r in rows),
        "repeat": int_column([r.repeat for r in rows], np.int32),
        "status": text_column(r.status for r in rows),
        "error_kind": text_column(r.error_kind for r in rows),
        "error_message": text_column(r.error_message for r in rows),
        "prompt_version_id": text_column(r.prompt_version_id for r in rows),
        "endpoint": text_column(r.endpoint for r in rows),
        "model": text_column(r.model for r in rows),
        "params": text_column(params),
        "output_text": text_column(r.output_text for r in rows),
        "input_tokens": int_column([r.input_tokens for r in rows], np.int32),
        "output_tokens": int_column([r.output_tokens for r in rows], np.int32),
        "finish_reason": text_column(r.finish_reason for r in rows),
        "model_version": text_column(r.model_version for r in rows),
        "latency_ms": real_column([r.latency_ms for r in rows]),
        "cost_usd": real_column([r.cost_usd for r in rows]),
        "attempts": int_column([r.attempts for r in rows], np.int32),
        "finished_at": time_column(r.finished_at for r in rows),
        "check_status": text_column(r.check_status for r in rows),
        "check_errors": text_column(
            list_text(r.check_errors) if r.check_status else None for r in rows
        ),
        "rule_status": text_column(r.rule_status for r in rows),
        "rule_errors": text_column(
            list_text(r.rule_errors) if r.rule_status else None for r in rows
        ),
        "token_entropy": real_column([r.token_entropy for r in rows]),
        "shard_id": text_column(r.shard_id for r in rows),
        "logprob_mean": real_column([r.logprob_mean for r in rows]),
        "logprob_tokens": int_column([r.logprob_tokens for r in rows], np.int32),
        "cache_hit": bool_column([r.cache_hit for r in rows]),
    }
