"""An item's trace as audit payloads: an event per failed attempt, one for its result.

Few, whole events keep the per-item cost small: the result event carries every stage
around the attempts (render, preflight, routing, response, validation and repair,
rules, final state) and the answered attempt itself (`attempt`), so an item answered
at once is one event; each attempt that failed (or was re-asked) has its own event with
its timing, outcome and wait. Empty fields are left out. Top level fields (`version_id`,
`model`, `status`, `error_kind`) are what the audit reads filter on. A split item's
assignment bucket is recorded with the plan (`assignments`) and joined in when the
trace is read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from promptlab.audit import Masker
from promptlab.providers.base import CompletionResponse
from promptlab.records import AttemptRow, FinalRow, VariantRecord


def prompt_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of the messages as rendered: role, US (0x1f), content, RS (0x1e) between
    messages. Joined strings, not JSON: this runs for every item on the engine loop."""
    text = "\x1e".join(f"{m.get('role')}\x1f{m.get('content')}" for m in messages)
    return hashlib.sha256(text.encode()).hexdigest()


def variables_hash(values: Mapping[str, Any]) -> str:
    """sha256 of the row's values sorted by name (name, US, value as text; RS between),
    so the hash is the row's whatever the column order."""
    text = "\x1e".join(f"{k}\x1f{values[k]}" for k in sorted(values))
    return hashlib.sha256(text.encode()).hexdigest()


def render_stage(
    variant: VariantRecord, values: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The render stage (and the rendered prompt itself, shown in the trace view)."""
    prompt = list(messages)
    return {
        "render": {
            "ref": variant.prompt_ref,
            "semver": variant.prompt_ref.rpartition("@")[2],
            "prompt_hash": prompt_hash(prompt),
            "variables_hash": variables_hash(values),
        },
        "prompt": prompt,
    }


def preflight_stage(tokens: int, max_tokens: int, window: int | None) -> dict[str, Any]:
    stage = {"prompt_tokens": tokens, "max_tokens": max_tokens}
    if window is not None:
        stage["context_window"] = window
    return stage


def masked_prompt(stages: dict[str, Any], masker: Masker, counts: dict[str, int]) -> dict[str, Any]:
    """The stages with the chosen patterns masked in the prompt's text."""
    prompt = [
        {**m, "content": masker.mask(m["content"], counts)}
        if isinstance(m.get("content"), str)
        else m
        for m in stages.get("prompt", ())
    ]
    return {**stages, "prompt": prompt}


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _ms(value: float | None) -> float | None:
    # Microseconds are the precision that means anything; 17 digits only grow the log.
    return None if value is None else round(value, 3)


def attempt_payload(row: AttemptRow, response: CompletionResponse | None) -> dict[str, Any]:
    """One attempt: its timing, outcome, error and the wait before it (and why).

    Times stay datetimes: the payload's JSON encoder writes them as ISO 8601.
    """
    payload: dict[str, Any] = {
        "attempt": row.attempt,
        "status": row.outcome,
        "error_kind": row.error_kind,
        "http_status": row.http_status,
        "error_message": row.error_message,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "wait_ms": _ms(row.wait_ms),
        "wait_reason": row.wait_reason,
        "retry_after_s": row.retry_after_s,
        "latency_ms": _ms(row.latency_ms),
        "reask": row.reask or None,
    }
    return _present(payload)


def result_payload(
    row: FinalRow,
    variant: VariantRecord,
    stages: Mapping[str, Any] | None,
    answered: Mapping[str, Any] | None,
    masked: Mapping[str, int] | None,
) -> dict[str, Any]:
    """The result: every stage around the attempts, and the answered attempt folded in."""
    stages = stages or {}
    payload: dict[str, Any] = {
        "status": row.status,
        "error_kind": row.error_kind,
        "error_message": row.error_message,
        "attempts": row.attempts,
        "version_id": row.prompt_version_id,
        "model": row.model,
        "row_index": row.row_index,
        "repeat": row.repeat,
        "render": stages.get("render"),
        "preflight": stages.get("preflight"),
        "routing": {"endpoint": row.endpoint, "model": row.model, "variant": variant.name},
        "response": None
        if row.model_version is None and row.output_text is None
        else _present(
            {
                "model_version": row.model_version,
                "input_tokens": row.input_tokens,
                "output_tokens": row.output_tokens,
                "finish_reason": row.finish_reason,
                "latency_ms": _ms(row.latency_ms),
                "cost_usd": row.cost_usd,
            }
        ),
        "validation": None if row.check_status is None else _validation(row),
        "attempt": answered,
        "prompt": stages.get("prompt"),
        "output": row.output_text,
        "masking": None if masked is None else dict(masked),
    }
    return _present(payload)


def _validation(row: FinalRow) -> dict[str, Any]:
    """The output checks: status, whether repaired, and the errors found (when any)."""
    return _present(
        {
            "check_status": row.check_status,
            "repaired": row.check_status == "repaired" or None,
            "check_errors": list(row.check_errors) or None,
            "rule_status": row.rule_status,
            "rule_errors": list(row.rule_errors) or None,
        }
    )
