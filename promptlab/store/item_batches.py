"""A write batch made ready to store: secrets masked, result events given the hash of
the row they describe, and rows as the columns DuckDB scans (NumPy or Arrow)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from promptlab.audit.chain import AuditDraft, as_real, epoch_us, row_digest
from promptlab.audit.redact import Redactor
from promptlab.records import AssignmentRecord, AttemptRow, FinalRow, WriteBatch

if TYPE_CHECKING:
    import pyarrow as pa


def result_values(row: FinalRow, params: str) -> tuple[Any, ...]:
    """A final row's RESULT_DIGEST_COLUMNS values as `results` stores them (`params` is
    its params' stored JSON text)."""
    return (
        row.key, row.run_id, row.status, row.error_kind, row.error_message,
        row.prompt_version_id, row.endpoint, row.model, row.variant, params,
        row.output_text, row.input_tokens, row.output_tokens, row.finish_reason,
        row.model_version, as_real(row.latency_ms), as_real(row.cost_usd), row.attempts,
        epoch_us(row.finished_at), row.check_status,
        list_text(row.check_errors) if row.check_status else None,
        row.rule_status, list_text(row.rule_errors) if row.rule_status else None,
    )  # fmt: skip


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


def text_column(values: Iterable[str]) -> np.ndarray[Any, np.dtype[np.object_]]:
    """Python strings as a NumPy object array, which DuckDB reads as VARCHAR."""
    return np.array(list(values), dtype=object)


def attempts_table(rows: Sequence[AttemptRow]) -> pa.Table:
    # Imported at the first batch, not when a run starts: see the note in
    # ItemStore.plan_items (items.py).
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


def finals_table(rows: Sequence[FinalRow], params: Sequence[str]) -> pa.Table:
    # Imported at the first batch, not when a run starts: see the note in
    # ItemStore.plan_items (items.py).
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
                [list_text(r.check_errors) if r.check_status else None for r in rows],
                pa.string(),
            ),
            "rule_status": pa.array([r.rule_status for r in rows], pa.string()),
            "rule_errors": pa.array(
                [list_text(r.rule_errors) if r.rule_status else None for r in rows],
                pa.string(),
            ),
            "token_entropy": pa.array([r.token_entropy for r in rows], pa.float64()),
            "shard_id": pa.array([r.shard_id for r in rows], pa.string()),
            "logprob_mean": pa.array([r.logprob_mean for r in rows], pa.float64()),
            "logprob_tokens": pa.array([r.logprob_tokens for r in rows], pa.int32()),
            "cache_hit": pa.array([r.cache_hit for r in rows], pa.bool_()),
        }
    )
