"""The gateway's live calls in DuckDB: one production log row, one exposure and one audit
event per call, in one transaction per folded batch of the call journal.

A call already stored (its trace is unique in `production_logs`) is skipped with its
exposure and event, so folding the journal again after a crash adds nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from promptlab.audit.chain import AuditDraft
from promptlab.audit.redact import Redactor
from promptlab.store.audit_append import append_events
from promptlab.store.connection import Store

#: The audit chain of live calls: one event per call, its trace the call's.
GATEWAY_CHAIN = "gateway"
#: Where an exposure came from, beside the file names of imported logs.
LIVE_SOURCE = "gateway"
#: Largest output kept in a call's audit event; the rest is cut, and says so.
MAX_AUDIT_OUTPUT_CHARS = 64 * 1024

_LOG_COLUMNS = (
    "prompt_version_id, unit_id, latency_ms, clicked, completed, event_time, source, "
    "imported_at, trace, experiment, variant, model, ttft_ms, input_tokens, output_tokens, "
    "cost_usd, finish_reason, check_status, http_status"
)


class LiveCallStore:
    """Store folded calls; each is a mapping the gateway wrote to its journal."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._redactor = Redactor.from_environ()

    def add(self, calls: Sequence[Mapping[str, Any]]) -> int:
        """Store the calls not stored yet; return how many were new."""
        if not calls:
            return 0
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            traces = [c["trace"] for c in calls]
            stored = {
                r[0]
                for r in tx.execute(
                    "SELECT trace FROM production_logs WHERE trace IN (SELECT unnest(?))",
                    [traces],
                ).fetchall()
            }
            new = _first_of_each([c for c in calls if c["trace"] not in stored])
            if not new:
                return 0
            tx.executemany(
                f"INSERT INTO production_logs ({_LOG_COLUMNS}) "
                "VALUES (?, ?, ?, NULL, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [_log_row(c, now) for c in new],
            )
            exposed = [_exposure_row(c, now) for c in new if c.get("experiment")]
            if exposed:
                tx.executemany("INSERT INTO exposures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", exposed)
            append_events(tx, [_draft(c) for c in new], self._redactor)
        return len(new)


def _first_of_each(calls: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    seen: set[str] = set()
    out = []
    for call in calls:
        if call["trace"] not in seen:
            seen.add(call["trace"])
            out.append(call)
    return out


def _at(call: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(call["at"])


def _log_row(call: Mapping[str, Any], now: datetime) -> list[Any]:
    return [
        call["version_id"],
        call.get("unit"),
        call["latency_ms"],
        _at(call),
        LIVE_SOURCE,
        now,
        call["trace"],
        call.get("experiment"),
        call.get("variant"),
        f"{call['endpoint']}:{call['model']}",
        call.get("ttft_ms"),
        call.get("input_tokens"),
        call.get("output_tokens"),
        call.get("cost_usd"),
        call.get("finish_reason"),
        call.get("check_status"),
        call.get("http_status"),
    ]


def _exposure_row(call: Mapping[str, Any], now: datetime) -> list[Any]:
    return [
        call["experiment"],
        call["revision"],
        call["unit"],
        call["variant"],
        call["bucket"],
        call["version_id"],
        LIVE_SOURCE,
        _at(call),
        now,
    ]


def _draft(call: Mapping[str, Any]) -> AuditDraft:
    output = str(call.get("output") or "")
    payload = {k: v for k, v in call.items() if k not in ("output", "at")}
    payload["output"] = output[:MAX_AUDIT_OUTPUT_CHARS]
    if len(output) > MAX_AUDIT_OUTPUT_CHARS:
        payload["output_cut_at"] = MAX_AUDIT_OUTPUT_CHARS
    return AuditDraft(
        chain=GATEWAY_CHAIN,
        kind="gateway.call",
        event_id=call["trace"],
        at=_at(call),
        payload=payload,
        actor=str(call.get("caller") or "gateway"),
        trace_id=call["trace"],
    )
