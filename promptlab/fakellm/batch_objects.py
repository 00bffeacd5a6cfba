"""The batch objects fakellm's Batch API routes answer with: OpenAI's `batch` and
Anthropic's `message_batch`, shaped as the SDKs' types (openai.types.Batch,
anthropic.types.messages.MessageBatch) from a Batch and the phase it is in.

Apart from batch_routes.py because they are pure: the same Batch and Phase give the
same object, whichever route (create, get, list, cancel, `GET /_batches`) answers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from promptlab.fakellm.batch_input import OPENAI_ENDPOINT
from promptlab.fakellm.batches import ANTHROPIC_STATUS, Batch, Phase


def _unix(moment: datetime) -> int:
    return int(moment.timestamp())


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def openai_batch(batch: Batch, phase: Phase) -> dict[str, Any]:
    """An OpenAI `batch` object."""
    ok, failed = batch.counts(phase)
    fields = batch.fields
    data: dict[str, Any] = {
        "id": batch.id,
        "object": "batch",
        "endpoint": OPENAI_ENDPOINT,
        "errors": None,
        "input_file_id": fields["input_file_id"],
        "completion_window": "24h",
        "status": phase.status,
        "output_file_id": fields.get("output_file_id"),
        "error_file_id": fields.get("error_file_id"),
        "created_at": _unix(batch.created_wall),
        "expires_at": _unix(batch.stamp(batch.expire_s)),
        **dict.fromkeys(
            (
                "in_progress_at",
                "finalizing_at",
                "completed_at",
                "failed_at",
                "expired_at",
                "cancelling_at",
                "cancelled_at",
            )
        ),
        **{f"{event}_at": _unix(batch.stamp(offset)) for event, offset in phase.at.items()},
        "request_counts": {"total": len(batch.lines), "completed": ok, "failed": failed},
        "metadata": fields.get("metadata"),
        "model": fields.get("model"),
        "usage": {
            "input_tokens": batch.tokens[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": batch.tokens[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(batch.tokens),
        },
    }
    if phase.status == "failed":
        data["errors"] = {"object": "list", "data": batch.refused}
    return data


def anthropic_batch(batch: Batch, phase: Phase, origin: str) -> dict[str, Any]:
    """An Anthropic `message_batch` object: its counts stay `processing` until it ends."""
    status = ANTHROPIC_STATUS.get(phase.status, "in_progress")
    total = len(batch.lines)
    counts = dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
    counts["processing"] = total
    end = next((phase.at[e] for e in ("completed", "expired", "cancelled") if e in phase.at), None)
    if status == "ended":
        ok, bad = batch.counts(phase)
        rest = "canceled" if phase.status == "cancelled" else "expired"
        counts.update(processing=0, succeeded=ok, errored=bad)
        counts[rest] = total - ok - bad
    cancelled = batch.cancel_at
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": counts,
        "created_at": _rfc3339(batch.created_wall),
        "expires_at": _rfc3339(batch.stamp(batch.expire_s)),
        "ended_at": None if end is None else _rfc3339(batch.stamp(end)),
        "cancel_initiated_at": None if cancelled is None else _rfc3339(batch.stamp(cancelled)),
        "archived_at": None,
        "results_url": f"{origin}/v1/messages/batches/{batch.id}/results"
        if status == "ended"
        else None,
    }
