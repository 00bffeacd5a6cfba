"""An item's trace as audit payloads: an event per failed attempt, one for its result.

Small events keep the per-item cost small at the engine's ceiling (bench/audit.py): an
item answered at once is one result event holding only what no other table holds (the
render hashes and the preflight), the fields the audit reads filter on (`version_id`,
`model`, `status`, `error_kind`), and the hash of its results row as stored. The trace
view reads that row (routing, response, validation and repair, rules, the final state
and the output), the item's `attempts` rows, and the prompt rendered again from the
template version and the dataset row, checked against both hashes. Each attempt that
failed (or was re-asked) has its own event with its timing, outcome and wait. Empty
fields are left out. A split item's assignment bucket is recorded with the plan
(`assignments`) and joined in when the trace is read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from promptlab.audit import RESULT_DIGEST_COLUMNS, Masker, epoch_us, result_digest, utc_text
from promptlab.batchfile import request_from_row
from promptlab.engine.spec import AS_WRITTEN
from promptlab.errors import PromptlabError
from promptlab.providers.base import CompletionResponse
from promptlab.records import AttemptRow, FinalRow, VariantRecord
from promptlab.store.audit import ItemRecord
from promptlab.templates import Template, coerce_text_values


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
    values: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The render stage as stored: the two hashes. The template version is the result's
    `version_id`, and the trace view renders the prompt again from it and the row (see
    `rendered_messages`), checked against `prompt_hash`."""
    return {"prompt_hash": prompt_hash(messages), "variables_hash": variables_hash(values)}


def rendered_messages(variant: VariantRecord, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The messages an item of `variant` with these dataset values was sent, rendered
    again the way the engine renders them (templates are deterministic)."""
    if variant.template.get(AS_WRITTEN):
        line = request_from_row(values, str(variant.template.get("id_field")))
        return [dict(m) for m in line.messages]
    template = Template.from_canonical(variant.template)
    return [dict(m) for m in template.render(coerce_text_values(template, dict(values)))]


def preflight_stage(tokens: int, max_tokens: int, window: int | None) -> dict[str, Any]:
    stage = {"prompt_tokens": tokens, "max_tokens": max_tokens}
    if window is not None:
        stage["context_window"] = window
    return stage


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
    row: FinalRow, stages: Mapping[str, Any] | None, masked: Mapping[str, int] | None
) -> dict[str, Any]:
    """The result event as stored: what no other table holds (the render hashes and the
    preflight, from `stages`), the fields the audit reads filter on, and what the
    masking masked. The writer adds `result_sha256`, the hash of the results row as
    stored.

    Flat on purpose: a dict holding only strings and numbers is not tracked by the
    garbage collector, and these wait in the writer's batch until the next commit,
    long enough to be promoted and walked again and again (bench/audit.py --parts).
    """
    payload: dict[str, Any] = {
        "status": row.status,
        "error_kind": row.error_kind,
        "version_id": row.prompt_version_id,
        "model": row.model,
        **(stages or {}),
    }
    if masked is not None:
        payload["masking"] = dict(masked)
    return _present(payload)


#: The stored result event's keys of the render and preflight stages (see result_payload).
RENDER_KEYS = ("prompt_hash", "variables_hash")
PREFLIGHT_KEYS = ("prompt_tokens", "max_tokens", "context_window")


def result_stages(row: Mapping[str, Any]) -> dict[str, Any]:
    """The stages a results row holds (a `results` row read as a dict), as the trace
    view shows them: routing, response, validation and the final state, and the output."""
    response = {
        "model_version": row.get("model_version"),
        "input_tokens": row.get("input_tokens"),
        "output_tokens": row.get("output_tokens"),
        "finish_reason": row.get("finish_reason"),
        "latency_ms": _ms(row.get("latency_ms")),
        "cost_usd": row.get("cost_usd"),
    }
    validation = {
        "check_status": row.get("check_status"),
        "repaired": row.get("check_status") == "repaired" or None,
        "check_errors": _json_list(row.get("check_errors")),
        "rule_status": row.get("rule_status"),
        "rule_errors": _json_list(row.get("rule_errors")),
    }
    stages: dict[str, Any] = {
        "status": row.get("status"),
        "error_kind": row.get("error_kind"),
        "error_message": row.get("error_message"),
        "attempts": row.get("attempts"),
        "version_id": row.get("prompt_version_id"),
        "model": row.get("model"),
        "row_index": row.get("row_index"),
        "repeat": row.get("repeat"),
        "routing": {
            "endpoint": row.get("endpoint"),
            "model": row.get("model"),
            "variant": row.get("variant"),
        },
        "response": _present(response) if any(v is not None for v in response.values()) else None,
        "validation": _present(validation) if row.get("check_status") else None,
        "output": row.get("output_text"),
    }
    return _present(stages)


def is_lean(payload: Mapping[str, Any]) -> bool:
    """Whether a result event is lean (its stages are read back from the stored rows);
    older result events carried a copy of every stage, routing among them."""
    return "routing" not in payload


def trace_details(
    payload: Mapping[str, Any], record: ItemRecord, masker: Masker | None
) -> tuple[dict[str, Any], tuple[dict[str, Any], ...], bool | None]:
    """A lean result event's stages as the trace view shows them, its attempts, and
    whether its results row still matches the event's hash (None: no row or no hash).

    The render stage gains the template ref and semver (from the run's variant) and the
    prompt rendered again from the template and the dataset row, with whether it and the
    row still hash to what the engine recorded. With masking on, the prompt is shown
    masked as the stored output is.
    """
    details: dict[str, Any] = {
        k: v for k, v in payload.items() if k not in RENDER_KEYS and k not in PREFLIGHT_KEYS
    }
    preflight = {k: payload[k] for k in PREFLIGHT_KEYS if k in payload}
    if preflight:
        details["preflight"] = preflight
    verified: bool | None = None
    if record.result is not None:
        details.update(result_stages(record.result))
        if payload.get("result_sha256"):
            stored = [_digest_value(record.result, c) for c in RESULT_DIGEST_COLUMNS]
            verified = result_digest(stored) == payload["result_sha256"]
    render = {k: payload[k] for k in RENDER_KEYS if k in payload}
    if record.variant is not None:
        ref = record.variant.prompt_ref
        render = {"ref": ref, "semver": ref.rpartition("@")[2], **render}
        if record.values is not None:
            render["variables_match"] = variables_hash(record.values) == render.get(
                "variables_hash"
            )
            try:
                prompt = rendered_messages(record.variant, record.values)
            except PromptlabError as exc:
                render["rendered_again"] = f"failed: {exc}"
            else:
                render["prompt_matches"] = prompt_hash(prompt) == render.get("prompt_hash")
                details["prompt"] = _masked(prompt, masker) if masker else prompt
    details["render"] = render
    return details, tuple(_attempt_view(a) for a in record.attempts), verified


def _digest_value(row: Mapping[str, Any], column: str) -> Any:
    value = row.get(column)
    return epoch_us(value) if isinstance(value, datetime) else value


def _masked(prompt: list[dict[str, Any]], masker: Masker) -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    return [
        {**m, "content": masker.mask(m["content"], counts)}
        if isinstance(m.get("content"), str)
        else m
        for m in prompt
    ]


def _attempt_view(row: Mapping[str, Any]) -> dict[str, Any]:
    """An `attempts` row as the trace shows an attempt (the shape `attempt_payload` has)."""
    return _present(
        {
            "attempt": row.get("attempt"),
            "status": row.get("outcome"),
            "error_kind": row.get("error_kind"),
            "http_status": row.get("http_status"),
            "error_message": row.get("error_message"),
            "started_at": _iso(row.get("started_at")),
            "ended_at": _iso(row.get("ended_at")),
            "wait_ms": _ms(row.get("wait_ms")),
            "wait_reason": row.get("wait_reason"),
            "retry_after_s": row.get("retry_after_s"),
            "latency_ms": _ms(row.get("latency_ms")),
            "reask": row.get("reask") or None,
        }
    )


def _iso(value: Any) -> str | None:
    return utc_text(value) if isinstance(value, datetime) else value


def _json_list(value: Any) -> list[Any] | None:
    """A JSON list column (stored as its text) as a list; None when empty or absent."""
    if isinstance(value, str):
        value = json.loads(value)
    return list(value) if value else None
