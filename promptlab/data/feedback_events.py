"""Feedback events sent live (`POST /v1/feedback/events`): a body read and checked by hand,
every event of it stored or none.

A body is one event object, or `{"events": [...]}` with 1 to MAX_EVENTS of them. An
event has an `id` (its idempotency key: an id seen before is skipped, so a client may
send again after a lost answer), what it is about (`trace`, the id of a gateway call,
or a prompt `version` and a `unit`), a `kind` (KINDS), for a `score` its `name` and a
numeric `value`, else an optional `value` (default 1), and an optional `time` (ISO 8601,
UTC unless it says otherwise; the store's clock when absent). The first bad field is
named in one line, `events[3].trace: ...` (or `trace: ...` for a single event), and
the whole body is refused. This module is pure: the store looks up the traces and
versions it names, and `event_rows` turns the checked events into rows with them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from promptlab.audit.redact import SECRET_SHAPES
from promptlab.errors import FeedbackError

#: Kinds an event may have: the file import's, and a named score.
KINDS = ("impression", "click", "thumbs_up", "thumbs_down", "completed", "score")
SCORE = "score"
#: The `source` of every event sent live (a file import's is its file name).
LIVE_SOURCE = "live"
#: Most events one body may carry.
MAX_EVENTS = 1_000
#: Longest event id, score name, unit, trace and version reference.
MAX_ID_CHARS = 200
MAX_NAME_CHARS = 100
MAX_UNIT_CHARS = 200
MAX_TRACE_CHARS = 200
MAX_REF_CHARS = 300
FIELDS = ("id", "trace", "version", "unit", "kind", "name", "value", "time")

_REF_HINT = "give name@version, name@label or a version id"


class EventIn(NamedTuple):
    """One checked event; `where` is how messages name it (`events[3]`, or empty)."""

    where: str
    id: str
    trace: str | None
    version: str | None
    unit: str | None
    kind: str
    name: str | None
    value: float
    time: datetime | None


class CallSeen(NamedTuple):
    """What the gateway recorded of a call: the version served, its unit and variant."""

    version_id: str
    unit: str | None
    variant: str | None


@dataclass(frozen=True)
class EventRow:
    """An event as stored in `feedback` (with source LIVE_SOURCE and the import time)."""

    event_id: str
    trace: str | None
    version_id: str
    variant: str | None
    unit: str | None
    kind: str
    name: str | None
    value: float
    time: datetime


def events_of(body: Any) -> list[EventIn]:
    """The checked events of a body (parsed JSON): one event, or `{"events": [...]}`.
    FeedbackError names the first bad field."""
    if not isinstance(body, dict):
        raise FeedbackError('body: expected an event object or {"events": [...]}')
    if "events" not in body:
        return [_event("", body)]
    extra = sorted(set(body) - {"events"})
    if extra:
        raise FeedbackError(f'{extra[0]}: a batch is {{"events": [...]}} and nothing else')
    events = body["events"]
    if not isinstance(events, list) or not 0 < len(events) <= MAX_EVENTS:
        raise FeedbackError(f"events: a list of 1 to {MAX_EVENTS:,} events")
    return [_event(f"events[{i}]", event) for i, event in enumerate(events)]


def event_rows(
    events: Sequence[EventIn],
    versions: Mapping[str, str],
    calls: Mapping[str, CallSeen],
    now: datetime,
) -> list[EventRow]:
    """The rows of checked `events`, given the version id of each reference that names
    one (`versions`) and the calls found by trace (`calls`); FeedbackError names the
    first event whose trace or version is unknown."""
    rows = []
    for event in events:
        variant, unit = None, event.unit
        if event.trace is not None:
            call = calls.get(event.trace)
            if call is None:
                raise FeedbackError(
                    f"{_at(event.where, 'trace')}: no call with trace {event.trace}"
                )
            version_id, unit, variant = call
        else:
            found = versions.get(event.version or "")
            if found is None:
                raise FeedbackError(
                    f"{_at(event.where, 'version')}: {event.version!r} is no known prompt "
                    f"version ({_REF_HINT})"
                )
            version_id = found
        rows.append(
            EventRow(
                event.id,
                event.trace,
                version_id,
                variant,
                unit,
                event.kind,
                event.name,
                event.value,
                event.time or now,
            )
        )
    return rows


def _at(where: str, field: str) -> str:
    return f"{where}.{field}" if where else field


def _event(where: str, event: Any) -> EventIn:
    """One event object checked field by field, in FIELDS order."""
    if not isinstance(event, dict):
        raise FeedbackError(f"{where or 'body'}: expected an event object")
    unknown = [key for key in event if key not in FIELDS]
    if unknown:
        raise FeedbackError(
            f"{_at(where, str(unknown[0]))}: not an event field (fields: {', '.join(FIELDS)})"
        )
    event_id = _text(where, event, "id", MAX_ID_CHARS, "the event's id (its idempotency key)")
    trace = _optional_text(where, event, "trace", MAX_TRACE_CHARS)
    version = _optional_text(where, event, "version", MAX_REF_CHARS)
    unit = _optional_text(where, event, "unit", MAX_UNIT_CHARS)
    if trace is not None and (version is not None or unit is not None):
        field = "version" if version is not None else "unit"
        raise FeedbackError(
            f"{_at(where, field)}: an event names a trace, or a version and a unit, not both"
        )
    if trace is None:
        if version is None:
            raise FeedbackError(
                f"{_at(where, 'trace')}: required, or a version and a unit ({_REF_HINT})"
            )
        if unit is None:
            raise FeedbackError(f"{_at(where, 'unit')}: required with a version")
        if SECRET_SHAPES.search(unit):
            # Stored and compared as written: refused, never kept or masked into another id.
            raise FeedbackError(
                f"{_at(where, 'unit')}: looks like a key or token; refused so that none is stored"
            )
    kind = event.get("kind")
    if kind not in KINDS:
        raise FeedbackError(f"{_at(where, 'kind')}: {kind!r} is not one of {', '.join(KINDS)}")
    name = None
    if kind == SCORE:
        name = _text(where, event, "name", MAX_NAME_CHARS, "a score's name")
    elif "name" in event:
        raise FeedbackError(f"{_at(where, 'name')}: only a score has a name")
    value = _value(where, event, required=kind == SCORE)
    return EventIn(where, event_id, trace, version, unit, kind, name, value, _time(where, event))


def _text(where: str, event: dict[str, Any], field: str, longest: int, what: str) -> str:
    value = _optional_text(where, event, field, longest)
    if value is None:
        raise FeedbackError(f"{_at(where, field)}: required ({what})")
    return value


def _optional_text(where: str, event: dict[str, Any], field: str, longest: int) -> str | None:
    value = event.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > longest:
        raise FeedbackError(f"{_at(where, field)}: a text of 1 to {longest} characters")
    if not value.isprintable():
        raise FeedbackError(f"{_at(where, field)}: has a control character")
    return value


def _value(where: str, event: dict[str, Any], *, required: bool) -> float:
    value = event.get("value")
    if value is None:
        if required:
            raise FeedbackError(f"{_at(where, 'value')}: required (the score, a number)")
        return 1.0
    # A JSON true is a bool, which Python counts as an int: not a number here.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FeedbackError(f"{_at(where, 'value')}: {value!r} is not a finite number")
    return float(value)


def _time(where: str, event: dict[str, Any]) -> datetime | None:
    value = event.get("time")
    if value is None:
        return None
    hint = "ISO 8601, e.g. 2026-11-01T09:30:00Z"
    if not isinstance(value, str) or len(value) > 64:
        raise FeedbackError(f"{_at(where, 'time')}: a time as text ({hint})")
    try:
        time = datetime.fromisoformat(value.strip())
    except ValueError:
        raise FeedbackError(f"{_at(where, 'time')}: {value!r} is not a time ({hint})") from None
    return time.replace(tzinfo=UTC) if time.tzinfo is None else time.astimezone(UTC)
