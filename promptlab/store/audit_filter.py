"""What the audit trail's reads filter on (AuditFilter) and its WHERE clauses, and a
stored audit_events row read back as an event."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from promptlab.audit.chain import AuditEvent

#: The stored columns of `audit_events`, in table order.
EVENT_COLUMNS = (
    'chain, seq, event_id, trace_id, run_id, kind, actor, "at", payload, prev_hash, hash'
)
#: Rows `events` returns unless told otherwise.
DEFAULT_LIMIT = 1_000


@dataclass(frozen=True)
class AuditFilter:
    """What the Audit page and `audit_events` filter on; None means any.

    `version_id` and `model` match result events (and change events naming them);
    `status` and `error_kind` match result and attempt events (an attempt's status is
    `ok` or `error`); `experiment` matches the runs made from it and its own events.
    """

    run_id: str | None = None
    experiment: str | None = None
    version_id: str | None = None
    model: str | None = None
    status: str | None = None
    error_kind: str | None = None
    kind: str | None = None
    trace_id: str | None = None
    chain: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = DEFAULT_LIMIT

    def describe(self) -> str:
        """The filters set, as a person reads them (`run run_3f2a, status failed`; the
        limit aside); '' when none is."""
        named = (
            ("run", self.run_id),
            ("experiment", self.experiment),
            ("version", self.version_id),
            ("model", self.model),
            ("status", self.status),
            ("error kind", self.error_kind),
            ("kind", self.kind),
            ("trace", self.trace_id),
            ("chain", self.chain),
            ("from", f"{self.since:%Y-%m-%d}" if self.since else None),
            ("to", f"{self.until:%Y-%m-%d}" if self.until else None),
        )
        return ", ".join(f"{name} {value}" for name, value in named if value)


def event_from_row(row: tuple[Any, ...]) -> AuditEvent:
    """A stored audit_events row (its EVENT_COLUMNS, in order) as an event."""
    chain, seq, event_id, trace_id, run_id, kind, actor, at, payload, prev, digest = row
    return AuditEvent(
        chain,
        int(seq),
        event_id,
        trace_id,
        run_id,
        kind,
        actor,
        at,
        payload if isinstance(payload, str) else json.dumps(payload),
        prev,
        digest,
    )


def filter_clauses(f: AuditFilter) -> tuple[list[str], list[Any]]:
    """The WHERE clauses (to be joined by AND) and their parameters that `f` sets."""
    clauses: list[str] = []
    params: list[Any] = []

    def add(sql: str, *values: Any) -> None:
        clauses.append(sql)
        params.extend(values)

    if f.run_id is not None:
        add("run_id = ?", f.run_id)
    if f.experiment is not None:
        # A run belongs to an experiment when its run.submitted event names it (every
        # run made from one, split or not); change events name it themselves.
        add(
            "(run_id IN (SELECT run_id FROM audit_events WHERE chain = 'changes' AND "
            "kind = 'run.submitted' AND json_extract_string(payload, '$.experiment') = ?) "
            "OR json_extract_string(payload, '$.experiment') = ?)",
            f.experiment,
            f.experiment,
        )
    if f.version_id is not None:
        add("json_extract_string(payload, '$.version_id') = ?", f.version_id)
    if f.model is not None:
        add("json_extract_string(payload, '$.model') = ?", f.model)
    if f.status is not None:
        add("json_extract_string(payload, '$.status') = ?", f.status)
    if f.error_kind is not None:
        add("json_extract_string(payload, '$.error_kind') = ?", f.error_kind)
    if f.kind is not None:
        add("kind = ?", f.kind)
    if f.trace_id is not None:
        add("trace_id = ?", f.trace_id)
    if f.chain is not None:
        add("chain = ?", f.chain)
    if f.since is not None:
        add('"at" >= ?', f.since)
    if f.until is not None:
        add('"at" <= ?', f.until)
    return clauses, params
