"""The gateway's live calls in DuckDB: one production log row, one exposure and one audit
event per call, in one transaction per folded batch of the call journal.

A call already stored (its trace is unique in `production_logs`) is skipped with its
exposure and event, so folding the journal again after a crash adds nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from promptlab.audit.chain import AuditDraft
from promptlab.audit.redact import Redactor
from promptlab.store.audit_append import append_events
from promptlab.store.connection import Store
from promptlab.store.item_batches import (
    Columns,
    int_column,
    real_column,
    text_column,
    time_column,
)

#: The audit chain of live calls: one event per call, its trace the call's.
GATEWAY_CHAIN = "gateway"
#: Where an exposure came from, beside the file names of imported logs.
LIVE_SOURCE = "gateway"
#: Largest output kept in a call's audit event; the rest is cut, and says so.
MAX_AUDIT_OUTPUT_CHARS = 64 * 1024


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
            # Registered NumPy columns, one INSERT each: an executemany of row values
            # ran one statement per row, and at 200 calls/s the fold thread took a third
            # of the server's time, holding the interpreter from the calls it serves.
            tx.register("g_calls", _log_columns(new, now))
            tx.execute(
                f"INSERT INTO production_logs ({_LOG_TARGET}) SELECT {_LOG_SOURCE} FROM g_calls"
            )
            tx.unregister("g_calls")
            exposed = [c for c in new if c.get("experiment")]
            if exposed:
                tx.register("g_exposures", _exposure_columns(exposed, now))
                tx.execute(
                    f"INSERT INTO exposures ({_EXPOSURE_TARGET}) "
                    f"SELECT {_EXPOSURE_SOURCE} FROM g_exposures"
                )
                tx.unregister("g_exposures")
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


_LOG_TARGET = (
    "prompt_version_id, unit_id, latency_ms, event_time, source, imported_at, trace, "
    "experiment, variant, model, ttft_ms, input_tokens, output_tokens, cost_usd, "
    "finish_reason, check_status, http_status, attempts, failed_attempts"
)
_LOG_SOURCE = (
    "version_id, unit, latency_ms, timezone('UTC', called_at), source, timezone('UTC', stored_at), "
    "trace, experiment, variant, model, ttft_ms, input_tokens, output_tokens, cost_usd, "
    "finish_reason, check_status, http_status, attempts, failed_attempts"
)


def _log_columns(calls: Sequence[Mapping[str, Any]], now: datetime) -> Columns:
    def text(name: str) -> Any:
        return text_column(c.get(name) for c in calls)

    def count(name: str) -> Any:
        return int_column([c.get(name) for c in calls], np.int64)

    return {
        "version_id": text("version_id"),
        "unit": text("unit"),
        "latency_ms": real_column([c["latency_ms"] for c in calls]),
        "called_at": time_column(_at(c) for c in calls),
        "source": text_column(LIVE_SOURCE for _ in calls),
        "stored_at": time_column(now for _ in calls),
        "trace": text("trace"),
        "experiment": text("experiment"),
        "variant": text("variant"),
        "model": text_column(f"{c['endpoint']}:{c['model']}" for c in calls),
        "ttft_ms": real_column([c.get("ttft_ms") for c in calls]),
        "input_tokens": count("input_tokens"),
        "output_tokens": count("output_tokens"),
        "cost_usd": real_column([c.get("cost_usd") for c in calls]),
        "finish_reason": text("finish_reason"),
        "check_status": text("check_status"),
        "http_status": int_column([c.get("http_status") for c in calls], np.int32),
        "attempts": int_column([c.get("attempts") for c in calls], np.int32),
        "failed_attempts": int_column([c.get("failed_attempts") for c in calls], np.int32),
    }


#: An exposure as `promptlab assign --log` writes one.
_EXPOSURE_TARGET = (
    "experiment, revision, unit_id, variant, bucket, prompt_version_id, source, exposed_at, "
    "imported_at"
)
_EXPOSURE_SOURCE = (
    "experiment, revision, unit, variant, bucket, version_id, source, timezone('UTC', called_at), "
    "timezone('UTC', stored_at)"
)


def _exposure_columns(calls: Sequence[Mapping[str, Any]], now: datetime) -> Columns:
    return {
        "experiment": text_column(c["experiment"] for c in calls),
        "revision": int_column([c["revision"] for c in calls], np.int64),
        "unit": text_column(c["unit"] for c in calls),
        "variant": text_column(c["variant"] for c in calls),
        "bucket": int_column([c["bucket"] for c in calls], np.int64),
        "version_id": text_column(c["version_id"] for c in calls),
        "source": text_column(LIVE_SOURCE for _ in calls),
        "called_at": time_column(_at(c) for c in calls),
        "stored_at": time_column(now for _ in calls),
    }


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
