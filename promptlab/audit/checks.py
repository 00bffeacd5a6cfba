"""What `audit verify` checks beyond each chain's own walk (pure; the SQL is in
promptlab/store/audit.py and promptlab/store/audit_rows.py): each chain against its
anchor, and the stored rows against the events that recorded them.

Every append moves its chain's anchor (`audit_anchors`: the head's seq and hash) in
the same transaction, so a chain ending before its anchor lost its tail, and a chain
with an anchor but no event lost every event.

A result event records `result_sha256`, the hash of its `results` row as stored, and
`attempt_sha256`, the hash of the answered attempt's `attempts` row; every other attempt
has its own event, a copy of its row. Verify streams each run's rows joined to those
events and sorts every row into one of:

- matched: the row hashes (or reads) as its event recorded;
- modified: an event covers the row, but it no longer matches it;
- deleted: an event records a row that is gone;
- inserted: no event records the row, in a run audited from its submission.

What is left unchecked, and counted as such: rows of runs made with the audit off
(`unaudited`), rows whose events predate the row hashes (`unhashed`), and the
`cancelled` rows a cancel writes in bulk, without an event, for items never answered
(`closed`): those must hold no answer, or they are reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from promptlab.audit.chain import RUN_ENDED, epoch_us, genesis_hash
from promptlab.audit.report import ChainProblem, ChainStatus

#: What a lean result event copies from its results row (event field -> column): named
#: when they differ, so a report says more than "the hash differs".
RESULT_COPIES = {
    "status": "status",
    "error_kind": "error_kind",
    "version_id": "prompt_version_id",
    "model": "model",
}
#: What an attempt event copies from its attempts row (event field -> column).
ATTEMPT_COPIES = {
    "attempt": "attempt",
    "status": "outcome",
    "error_kind": "error_kind",
    "http_status": "http_status",
    "error_message": "error_message",
    "started_at": "started_at",
    "ended_at": "ended_at",
    "wait_ms": "wait_ms",
    "wait_reason": "wait_reason",
    "retry_after_s": "retry_after_s",
    "latency_ms": "latency_ms",
    "reask": "reask",
}
#: Attempt fields an event keeps to the microsecond (engine/record/trace.py rounds them).
_ROUNDED = frozenset({"wait_ms", "latency_ms"})
_TIMES = frozenset({"started_at", "ended_at"})
#: Columns a results row fills only from an answer: a `cancelled` row written in bulk
#: (no event) must leave them all empty.
ANSWER_COLUMNS = (
    "output_text",
    "input_tokens",
    "output_tokens",
    "finish_reason",
    "model_version",
    "latency_ms",
    "cost_usd",
    "check_status",
    "rule_status",
)
#: Final states a resume deletes (and so may leave a result event without its row).
REOPENED_STATES = frozenset({"failed", "cancelled"})
#: Item states of an item put back by a resume and not final yet.
OPEN_STATES = frozenset({"pending", "in_flight"})


def check_anchor(
    status: ChainStatus, hashes: Mapping[int, str], anchor: tuple[int, str] | None
) -> ChainStatus:
    """A whole chain must still reach the head its anchor recorded (seq, hash), read
    before the chain was walked: events appended since are fine, a chain ending before
    it lost its tail, and another hash there means its events were rewritten. A chain
    with no anchor lost it: every append writes one (migration 0010 for older ones)."""
    if not status.ok:
        return status
    problem: ChainProblem | None = None
    if anchor is None:
        problem = ChainProblem(
            status.chain, 0, "", "not anchored", "its audit_anchors row is missing"
        )
    elif status.head_seq < anchor[0]:
        problem = ChainProblem(
            status.chain,
            anchor[0],
            "",
            "tail cut",
            f"the chain ends at seq {status.head_seq}, but its anchor recorded its head "
            f"at seq {anchor[0]}: events seq {status.head_seq + 1}-{anchor[0]} were deleted",
        )
    elif hashes.get(anchor[0]) != anchor[1]:
        problem = ChainProblem(
            status.chain,
            anchor[0],
            "",
            "modified",
            f"event seq {anchor[0]} is not the head its anchor recorded (the chain was "
            "rewritten from there back)",
        )
    return status if problem is None else replace(status, problem=problem)


def check_run_ends(status: ChainStatus, changes: Iterable[Any]) -> ChainStatus:
    """The changes chain records one `run.ended` per start of a run: a second end with
    no `run.resumed` since the first means the run ended twice (a cancel raced a resume,
    say, and both were recorded)."""
    if not status.ok:
        return status
    ended: dict[str, str] = {}
    for event in changes:
        if event.kind == "run.resumed" and event.run_id:
            ended.pop(event.run_id, None)
        elif event.kind == RUN_ENDED and event.run_id:
            first = ended.get(event.run_id)
            if first is not None:
                problem = ChainProblem(
                    status.chain,
                    event.seq,
                    event.event_id,
                    "ended twice",
                    f"run {event.run_id} ended {event.payload.get('status')} after it had "
                    f"ended {first}, with no resume between",
                )
                return replace(status, problem=problem)
            ended[event.run_id] = str(event.payload.get("status"))
    return status


def missing_chain(chain: str, detail: str) -> ChainStatus:
    """The status of a chain the audit says exists, none of whose events does."""
    problem = ChainProblem(chain, 0, "", "missing chain", detail)
    return ChainStatus(chain, 0, 0, genesis_hash(chain), True, problem)


def holds_answer(row: Mapping[str, Any]) -> bool:
    """Whether a results row holds anything only an answer gives."""
    return any(row.get(column) is not None for column in ANSWER_COLUMNS)


def result_modified(
    seq: int, event_id: str, payload: Mapping[str, Any], row: Mapping[str, Any]
) -> str:
    """Why a results row no longer matches its event: the copied fields that differ, or
    (the hash covers every column) that some other column changed."""
    named = _differences(payload, row, RESULT_COPIES)
    what = "; ".join(named) if named else "a column the hash covers changed"
    return f"{what} (it no longer matches the result_sha256 of result event seq {seq}, {event_id})"


def attempt_modified(
    seq: int, event_id: str, payload: Mapping[str, Any], row: Mapping[str, Any]
) -> str | None:
    """None when an attempts row reads as its attempt event recorded it; else which
    columns differ."""
    named = _differences(payload, row, ATTEMPT_COPIES)
    if not named:
        return None
    return f"{'; '.join(named)} (attempt event seq {seq}, {event_id})"


def _differences(
    payload: Mapping[str, Any], row: Mapping[str, Any], copies: Mapping[str, str]
) -> list[str]:
    out = []
    for name, column in copies.items():
        recorded, stored = payload.get(name), row.get(column)
        if _comparable(name, recorded) != _comparable(name, stored):
            out.append(f"{column} differs (event: {recorded!r}, row: {stored!r})")
    return out


def _comparable(name: str, value: Any) -> Any:
    """An event's or a row's value in one form: times as epoch microseconds, rounded
    milliseconds as the event keeps them, an absent flag as False."""
    if name in _TIMES:
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                return value
        return epoch_us(value) if isinstance(value, datetime) else value
    if name in _ROUNDED and isinstance(value, int | float):
        return round(float(value), 3)
    if name == "reask":
        return bool(value)
    return value


def payload_of(text: str | None) -> dict[str, Any]:
    """A stored payload's JSON text as a dict (empty when absent or not an object)."""
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def result_event_orphaned(
    status: str | None,
    at: datetime,
    now_status: str | None,
    now_at: datetime | None,
    item_status: str | None,
) -> str | None:
    """Why a result event whose row is gone (none at its time) points at a deleted row,
    or None when the engine explains it:

    - a resume deleted the event's failed or cancelled row: the item holds a later row,
      or none yet (it is open again);
    - the answer came after its item was cancelled: the item holds the earlier
      `cancelled` row and the answer was kept as an attempt only.
    """
    reopened = status in REOPENED_STATES
    if now_status is None or now_at is None:
        if reopened and item_status in OPEN_STATES:
            return None
        return f"its row is gone (the item is {item_status or 'gone too'})"
    if now_at > at:
        if reopened:
            return None
        return f"a later {now_status} row replaced it, but a resume never replaces a {status} row"
    if now_status == "cancelled":
        return None
    return f"an earlier {now_status} row stands in its place"
