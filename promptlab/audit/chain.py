"""The audit trail's pure part: events, canonical JSON and hash chaining.

Events live in chains. Each event stores `hash = sha256(prev_hash, its fields)`: chain,
seq, event id, trace id, run id, kind, actor, time (UTC microseconds) and the payload's
JSON text exactly as stored (DuckDB keeps JSON text verbatim), joined by a separator.
Editing any field of a stored row breaks its own hash; deleting or inserting a row
breaks the seq numbering or the next row's `prev_hash`. Verification names the first
such event (the walk is promptlab/audit/walk.py).

How chains are anchored:

- ``changes`` holds the change events (prompt versions, labels, experiments, runs
  submitted / cancelled / resumed / ended, imports, exports). Its genesis `prev_hash`
  is ``sha256("promptlab-audit:changes")``.
- ``run:<run_id>`` holds one run's traces. It is anchored in ``changes``: the run's
  ``run.submitted`` change event names the chain, and the run chain's first event uses
  that event's hash as its `prev_hash` (``sha256("promptlab-audit:<chain>")`` when no
  such event exists, e.g. a run submitted with the audit off: the chain is then marked
  unanchored). Each ``run.ended`` change event records the run chain's head (seq and
  hash) at that moment, so deleting a run's last events is caught too.
- Every chain's head (seq, hash) is also kept in ``audit_anchors``, moved in the
  transaction that appends to it: a chain whose newest events, or all of them, were
  deleted fails verify, the ``changes`` chain included (promptlab/audit/checks.py).
- Chains are per run so concurrent runs need no global lock: each batch reads its
  chains' heads inside its own transaction, so the chain always continues from the
  last *stored* event, which is what keeps it whole across a kill -9.

Verify also checks the stored rows against the events that recorded them
(promptlab/audit/checks.py).

What it cannot catch (documented, not hidden): someone who rewrites a chain's tail,
recomputes every hash after it and moves its anchor to match, or who empties the log
and its anchors alike (the database then reads as one written with the audit off);
keep the head hash `promptlab audit verify` prints somewhere else to pin the log at
that point.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import orjson

from promptlab.audit.digests import ATTEMPT_DIGEST_COLUMNS as ATTEMPT_DIGEST_COLUMNS
from promptlab.audit.digests import RESULT_DIGEST_COLUMNS as RESULT_DIGEST_COLUMNS
from promptlab.audit.digests import as_real as as_real
from promptlab.audit.digests import attempt_values as attempt_values
from promptlab.audit.digests import epoch_us as epoch_us
from promptlab.audit.digests import row_digest as row_digest
from promptlab.audit.digests import stored_values as stored_values
from promptlab.audit.masking import MASK_PATTERNS as MASK_PATTERNS
from promptlab.audit.masking import Masker as Masker

#: The chain of change events (everything that is not a run's item trace).
CHANGES_CHAIN = "changes"
#: Kinds of change events. Other branches add theirs through `Context.audit_change`.
RUN_SUBMITTED = "run.submitted"
RUN_ENDED = "run.ended"


def run_chain(run_id: str) -> str:
    """The chain holding one run's item traces."""
    return f"run:{run_id}"


def genesis_hash(chain: str) -> str:
    """The `prev_hash` of a chain's first event when nothing else anchors it."""
    return hashlib.sha256(f"promptlab-audit:{chain}".encode()).hexdigest()


def utc_text(at: datetime) -> str:
    """A timestamp as exported: UTC ISO 8601 with microseconds."""
    return at.astimezone(UTC).isoformat(timespec="microseconds")


#: Joins an event's fields before hashing (ASCII unit separator: in no field we write).
_SEP = "\x1f"


def payload_text(payload: Mapping[str, Any]) -> str:
    """A payload as stored and hashed: compact JSON (the text itself is what is hashed,
    so key order need not be canonical)."""
    return _payload_bytes(payload).decode()


def _payload_bytes(payload: Mapping[str, Any]) -> bytes:
    # orjson: about 5x the standard encoder, and this runs for every event. Datetimes
    # come out as ISO 8601 (what `datetime.isoformat` gives), written in Rust.
    return orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS)


@dataclass(slots=True)
class AuditDraft:
    """An event before it is chained: the store gives it its seq, prev_hash and hash.

    Not frozen: one is built per item on the engine loop, and a frozen dataclass's
    `__init__` costs twice as much. Nothing changes a draft once made.
    """

    chain: str
    kind: str
    event_id: str
    at: datetime
    payload: Mapping[str, Any]
    actor: str = "engine"
    run_id: str | None = None
    trace_id: str | None = None


@dataclass(frozen=True)
class AuditEvent:
    """One stored event; `payload_json` is the stored (and hashed) text of `payload`."""

    chain: str
    seq: int
    event_id: str
    trace_id: str | None
    run_id: str | None
    kind: str
    actor: str
    at: datetime
    payload_json: str
    prev_hash: str
    hash: str

    @cached_property
    def payload(self) -> dict[str, Any]:
        value = json.loads(self.payload_json)
        return value if isinstance(value, dict) else {"value": value}


def event_record(event: AuditEvent) -> dict[str, Any]:
    """One event as a JSON-ready dict (an export line): every stored field."""
    return {
        "chain": event.chain,
        "seq": event.seq,
        "event_id": event.event_id,
        "trace_id": event.trace_id,
        "run_id": event.run_id,
        "kind": event.kind,
        "actor": event.actor,
        "at": utc_text(event.at),
        "payload": event.payload,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


@dataclass(frozen=True)
class AuditTrace:
    """One item's events in order, and what its result event points at.

    Result events written since the trace went lean hold the render hashes, preflight
    and a hash of the stored results row (`result_sha256`); `details` then holds every
    stage as the trace view shows it, read back from that row, the `attempts` rows and
    the prompt rendered again (see `wb.audit.trace`). Older result events carried
    a copy of all of it, and `details` is that payload.
    """

    trace_id: str
    run_id: str | None
    events: tuple[AuditEvent, ...]
    #: A split item's assignment bucket (from the run's plan); None when not split.
    bucket: int | None = None
    #: Every stage of the result, as shown (None: no result event).
    details: Mapping[str, Any] | None = None
    #: The item's attempts from the `attempts` table, in order (empty: read from events).
    attempt_rows: tuple[Mapping[str, Any], ...] = ()
    #: Whether the stored results row still matches its event's hash (None: not checked).
    result_verified: bool | None = None

    @property
    def attempts(self) -> list[dict[str, Any]]:
        """Every attempt in order: from the `attempts` table when read, else those with
        their own event and the answered one folded into an older result event."""
        if self.attempt_rows:
            return [dict(a) for a in self.attempt_rows]
        found = [dict(e.payload) for e in self.events if e.kind == "attempt"]
        for e in self.events:
            if e.kind == "result" and isinstance(e.payload.get("attempt"), dict):
                found.append(dict(e.payload["attempt"]))
        return sorted(found, key=lambda a: int(a.get("attempt", 0)))

    @property
    def result(self) -> AuditEvent | None:
        results = [e for e in self.events if e.kind == "result"]
        return results[-1] if results else None

    @property
    def stages(self) -> Mapping[str, Any]:
        """The result's stages as shown: `details`, else the result event's payload."""
        if self.details is not None:
            return self.details
        return {} if self.result is None else self.result.payload

    @property
    def prompt(self) -> Any:
        return self.stages.get("prompt")

    @property
    def output(self) -> str | None:
        return self.stages.get("output")


def event_hash(
    prev_hash: str,
    chain: str,
    seq: int,
    event_id: str,
    trace_id: str | None,
    run_id: str | None,
    kind: str,
    actor: str,
    at: datetime,
    payload_json: str,
) -> str:
    """The hash of one event chained to `prev_hash` (its payload as the stored JSON text)."""
    return _digest(
        prev_hash,
        chain,
        seq,
        event_id,
        trace_id,
        run_id,
        kind,
        actor,
        epoch_us(at),
        payload_json.encode(),
    )


def _digest(
    prev_hash: str,
    chain: str,
    seq: int,
    event_id: str,
    trace_id: str | None,
    run_id: str | None,
    kind: str,
    actor: str,
    at_us: int,
    payload: bytes,
) -> str:
    # sha256 over the fields joined by _SEP, the payload last (as its UTF-8 bytes).
    head = _SEP.join(
        (
            prev_hash,
            chain,
            str(seq),
            event_id,
            _nullable(trace_id),
            _nullable(run_id),
            kind,
            actor,
            str(at_us),
            "",
        )
    )
    return hashlib.sha256(head.encode() + payload).hexdigest()


def _nullable(value: str | None) -> str:
    # NULL hashes apart from '': otherwise one could be swapped for the other unseen.
    return "\x00" if value is None else value


def hash_of(event: AuditEvent) -> str:
    """What `event.hash` must be, recomputed from its stored fields."""
    return event_hash(
        event.prev_hash,
        event.chain,
        event.seq,
        event.event_id,
        event.trace_id,
        event.run_id,
        event.kind,
        event.actor,
        event.at,
        event.payload_json,
    )


@dataclass
class ChainedColumns:
    """Drafts numbered and hashed, as the columns of `audit_events` (in its order)."""

    chain: list[str] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    event_id: list[str] = field(default_factory=list)
    trace_id: list[str | None] = field(default_factory=list)
    run_id: list[str | None] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    actor: list[str] = field(default_factory=list)
    #: The event times as UTC microseconds since 1970 (as hashed and stored).
    at_us: list[int] = field(default_factory=list)
    payload: list[str] = field(default_factory=list)
    prev_hash: list[str] = field(default_factory=list)
    hash: list[str] = field(default_factory=list)

    def heads(self) -> dict[str, tuple[int, str]]:
        """Each chain's last (seq, hash) in these columns."""
        return {c: (s, h) for c, s, h in zip(self.chain, self.seq, self.hash, strict=True)}


def chain_drafts(
    drafts: Iterable[AuditDraft],
    heads: Mapping[str, tuple[int, str]],
    clean: Callable[[str], str] | None = None,
    suspect: Callable[[bytes], bool] | None = None,
) -> ChainedColumns:
    """Number and hash drafts in order, into the columns they are stored as.

    `heads` maps a chain to its last stored (seq, hash), or, for a chain with no event
    yet, to (0, the prev_hash its first event takes). `clean` (secret redaction) runs on
    each payload's JSON text before it is hashed; what it returns must still be JSON.
    `suspect`, when given, is a cheap test on the batch's joined JSON that must be true
    whenever `clean` could change any of it; `clean` then runs only when it is.

    One pass per event, straight into columns: this runs for every item of every run.
    """
    drafts = list(drafts)
    texts, blobs = _payload_texts(drafts, clean, suspect)
    state = dict(heads)
    out = ChainedColumns()
    for draft, payload_json, blob in zip(drafts, texts, blobs, strict=True):
        chain = draft.chain
        head = state.get(chain)
        seq, prev = head if head is not None else (0, genesis_hash(chain))
        seq += 1
        at_us = epoch_us(draft.at)
        digest = _digest(
            prev,
            chain,
            seq,
            draft.event_id,
            draft.trace_id,
            draft.run_id,
            draft.kind,
            draft.actor,
            at_us,
            blob,
        )
        state[chain] = (seq, digest)
        out.chain.append(chain)
        out.seq.append(seq)
        out.event_id.append(draft.event_id)
        out.trace_id.append(draft.trace_id)
        out.run_id.append(draft.run_id)
        out.kind.append(draft.kind)
        out.actor.append(draft.actor)
        out.at_us.append(at_us)
        out.payload.append(payload_json)
        out.prev_hash.append(prev)
        out.hash.append(digest)
    return out


def _payload_texts(
    drafts: list[AuditDraft],
    clean: Callable[[str], str] | None,
    suspect: Callable[[bytes], bool] | None,
) -> tuple[list[str], list[bytes]]:
    """Each draft's payload as the JSON text stored and the bytes hashed, secrets masked."""
    blobs = [_payload_bytes(d.payload) for d in drafts]
    texts = [b.decode() for b in blobs]
    if clean is not None:
        # One pass over the whole batch: nothing to mask is the common case.
        if suspect is not None:
            dirty = suspect(b"\x1e".join(blobs))
        else:
            joined = "\x1e".join(texts)
            dirty = clean(joined) != joined
        if dirty:
            texts = [_cleaned(t, d.payload, clean) for t, d in zip(texts, drafts, strict=True)]
            blobs = [t.encode() for t in texts]
    return texts, blobs


def _cleaned(payload_json: str, payload: Any, clean: Callable[[str], str]) -> str:
    """The JSON text with secrets masked: on the whole text (one pass, the common case
    of nothing to mask costs one scan), or string by string if masking broke the JSON."""
    text = clean(payload_json)
    if text == payload_json:
        return text
    try:
        json.loads(text)
    except ValueError:
        return payload_text(_clean_strings(payload, clean))
    return text


def _clean_strings(value: Any, clean: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, Mapping):
        return {str(k): _clean_strings(v, clean) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_strings(v, clean) for v in value]
    return value
