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
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from promptlab.audit.chain import (
    ATTEMPT_DIGEST_COLUMNS,
    RESULT_DIGEST_COLUMNS,
    Masker,
    epoch_us,
    row_digest,
    stored_values,
    utc_text,
)
from promptlab.conversations.replay import (
    BEFORE_KEY,
    CONVERSATION_KEY,
    conversation_of,
    with_conversation,
)
from promptlab.conversations.shards import sharded
from promptlab.data.batchfile import request_from_row
from promptlab.engine.spec.runspec import AS_WRITTEN
from promptlab.errors import PromptlabError
from promptlab.prompts.templates import Template, coerce_text_values
from promptlab.providers.base import CompletionResponse
from promptlab.records import AttemptRow, FinalRow, VariantRecord
from promptlab.store.audit import ItemRecord


def prompt_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of the messages as rendered: role, US (0x1f), content, RS (0x1e) between
    messages. Joined strings, not JSON: this runs for every item on the engine loop."""
    text = "\x1e".join(f"{m.get('role')}\x1f{m.get('content')}" for m in messages)
    return hashlib.sha256(text.encode()).hexdigest()


def variables_hash(values: Mapping[str, Any]) -> str:
    """sha256 of the row's values sorted by name (name, US, value as text; RS between),
    so the hash is the row's whatever the column order. A replayed turn's row is hashed
    as stored: without the history its session's earlier rows make (each hashed with
    its own turn)."""
    names = sorted(values)
    if BEFORE_KEY in values:
        names = [k for k in names if k != CONVERSATION_KEY]
    text = "\x1e".join(f"{k}\x1f{values[k]}" for k in names)
    return hashlib.sha256(text.encode()).hexdigest()


def render_stage(
    values: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    answers: Sequence[str] | None = None,
    shard: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The render stage as stored: the two hashes. The template version is the result's
    `version_id`, and the trace view renders the prompt again from it and the row (see
    `rendered_messages`), checked against `prompt_hash`. A replayed turn sent with the
    model's own history also keeps the earlier `answers` it carried (stored outputs),
    and one sent with a context shard its `shard` (id, seq_no, messages, summary)."""
    stage: dict[str, Any] = {
        "prompt_hash": prompt_hash(messages),
        "variables_hash": variables_hash(values),
    }
    if answers is not None:
        stage[HISTORY_ANSWERS] = list(answers)
    if shard is not None:
        stage[SHARD] = dict(shard)
    return stage


def rendered_messages(
    variant: VariantRecord,
    values: Mapping[str, Any],
    answers: Sequence[str] | None = None,
    shard: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The messages an item of `variant` with these dataset values (and, for a replayed
    turn, the model's earlier `answers` and its context `shard`) was sent, rendered
    again the way the engine renders them (templates are deterministic)."""
    if variant.template.get(AS_WRITTEN):
        line = request_from_row(values, str(variant.template.get("id_field")))
        return [dict(m) for m in line.messages]
    template = Template.from_canonical(variant.template)
    rendered = template.render(coerce_text_values(template, dict(values)))
    conversation = conversation_of(values, list(answers) if answers is not None else None)
    if shard:
        conversation = sharded(
            conversation, int(shard["first_message"]), None, shard.get("summary")
        )
    return [dict(m) for m in with_conversation(rendered, {CONVERSATION_KEY: conversation})]


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


def attempt_payload(
    row: AttemptRow, response: CompletionResponse | None, served_by: str | None = None
) -> dict[str, Any]:
    """One attempt: its timing, outcome, error, the wait before it (and why), and the
    worker that made the call when one did.

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
        "served_by": served_by,
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
        # Answered from the response cache: nothing was sent (engine/send/cache.py).
        "cache_hit": row.cache_hit or None,
        **(stages or {}),
    }
    if masked is not None:
        payload["masking"] = dict(masked)
    return _present(payload)


#: The stored result event's keys of the render and preflight stages (see result_payload).
#: A generated-history turn's earlier answers, as the render stage keeps them.
HISTORY_ANSWERS = "history_answers"
#: A replayed turn's context shard, as the render stage keeps it.
SHARD = "shard"
RENDER_KEYS = ("prompt_hash", "variables_hash", HISTORY_ANSWERS, SHARD)
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
        "cache_hit": row.get("cache_hit") or None,
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
    payload: Mapping[str, Any],
    at: datetime,
    record: ItemRecord,
    mask: Sequence[str],
    clean: Callable[[str], str],
) -> tuple[dict[str, Any], tuple[dict[str, Any], ...], bool | None]:
    """A lean result event (written at `at`) as the trace view shows it: its stages, its
    attempts, and whether its results row and answered attempt still match the hashes
    it recorded (None: nothing to check, or the row was replaced by a later final row).

    The render stage gains the template ref and semver (from the run's variant) and, if
    the engine rendered the item, the prompt rendered again from the template and the
    dataset row, with whether it and the row still hash to what the engine recorded.
    That prompt is not stored, so it passes the same redaction as everything stored
    (`clean`), and the masking the run used (the event's `masking`) or `mask`.
    """
    details: dict[str, Any] = {
        k: v
        for k, v in payload.items()
        if k not in RENDER_KEYS and k not in PREFLIGHT_KEYS and k != "attempt_sha256"
    }
    preflight = {k: payload[k] for k in PREFLIGHT_KEYS if k in payload}
    if preflight:
        details["preflight"] = preflight
    verified = _verified(payload, at, record, details)
    render = {k: payload[k] for k in RENDER_KEYS if k in payload}
    if record.variant is not None:
        ref = record.variant.prompt_ref
        render = {"ref": ref, "semver": ref.rpartition("@")[2], **render}
    if record.variant is not None and record.values is not None and "prompt_hash" in render:
        render["variables_match"] = variables_hash(record.values) == render["variables_hash"]
        try:
            prompt = rendered_messages(
                record.variant, record.values, payload.get(HISTORY_ANSWERS), payload.get(SHARD)
            )
        except PromptlabError as exc:
            render["rendered_again"] = clean(f"failed: {exc}")
        else:
            render["prompt_matches"] = prompt_hash(prompt) == render["prompt_hash"]
            names = sorted(set(mask) | set(payload.get("masking") or ()))
            details["prompt"] = _shown(prompt, clean, Masker(names) if names else None)
    details["render"] = render
    return details, tuple(_attempt_view(a) for a in record.attempts), verified


def _verified(
    payload: Mapping[str, Any], at: datetime, record: ItemRecord, details: dict[str, Any]
) -> bool | None:
    """Whether the stored rows match the event's hashes; the row's stages go in
    `details` (said to be a later row's when the event's own row was replaced)."""
    row = record.result
    if row is None:
        return None
    details.update(result_stages(row))
    finished = row.get("finished_at")
    if isinstance(finished, datetime) and epoch_us(finished) != epoch_us(at):
        # A resumed or cancelled item's later final row: this event did not hash it.
        details["stored result"] = (
            f"a later final row ({row.get('status')} at {utc_text(finished)}), "
            "not the one this event recorded"
        )
        return None
    if not payload.get("result_sha256"):
        return None
    ok = row_digest(stored_values(row, RESULT_DIGEST_COLUMNS)) == payload["result_sha256"]
    expected = payload.get("attempt_sha256")
    if expected and record.attempts:
        answered = max(record.attempts, key=lambda a: int(a.get("attempt") or 0))
        values = stored_values(
            {
                "idempotency_key": row.get("idempotency_key"),
                "run_id": row.get("run_id"),
                **answered,
            },
            ATTEMPT_DIGEST_COLUMNS,
        )
        ok = ok and row_digest(values) == expected
    return ok


def _shown(
    prompt: list[dict[str, Any]], clean: Callable[[str], str], masker: Masker | None
) -> list[dict[str, Any]]:
    counts: dict[str, int] = {}
    shown = []
    for m in prompt:
        content = m.get("content")
        if isinstance(content, str):
            content = clean(content)
            m = {**m, "content": masker.mask(content, counts) if masker else content}
        shown.append(m)
    return shown


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
