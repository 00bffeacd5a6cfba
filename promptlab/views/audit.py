"""The Audit page's data, shaped in plain rows (no Streamlit here): the events table,
the chain status line, a trace's stages and its timeline bars.

The figure is drawn from the bars by `promptlab.views.audit_charts.trace_timeline_chart`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from promptlab.audit.chain import CHANGES_CHAIN, AuditEvent, AuditTrace
from promptlab.audit.report import VerifyReport


def event_rows(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """One row per event for the events table: where it sits, what it says."""
    rows = []
    for e in events:
        p = e.payload
        rows.append(
            {
                "at": e.at,
                "kind": e.kind,
                "trace": e.trace_id,
                "run": e.run_id,
                "status": _text(p.get("status")),
                "error kind": _text(p.get("error_kind")),
                "model": _text(p.get("model")),
                "version": _text(p.get("version_id")),
                "actor": e.actor,
                "chain": e.chain,
                "seq": e.seq,
            }
        )
    return rows


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class ChainSummary:
    """What the top of the Audit page (and `audit verify`) says about the log."""

    ok: bool
    headline: str
    #: One line per broken chain naming its first bad event, then per stored row that
    #: differs from its events (the first of each run; the rest counted).
    problems: tuple[str, ...]
    #: Run chains with no `run.submitted` event to anchor them (the audit was off).
    unanchored: int
    #: What verify found but could not check (rows of runs made with the audit off...).
    notes: tuple[str, ...] = ()


def chain_summary(report: VerifyReport) -> ChainSummary:
    events = sum(c.events for c in report.chains)
    chains = len(report.chains)
    unanchored = sum(1 for c in report.chains if not c.anchored and c.chain != CHANGES_CHAIN)
    notes = _notes(report)
    if report.ok:
        noun = "chain" if chains == 1 else "chains"
        headline = f"All {chains} {noun} verified ({events} events)"
        if report.runs:
            results = sum(r.results for r in report.runs)
            attempts = sum(r.attempts for r in report.runs)
            headline += f"; {results} results and {attempts} attempts rows match their events"
        return ChainSummary(True, headline, (), unanchored, notes)
    broken = [c.problem for c in report.chains if c.problem is not None]
    differing = [r for r in report.runs if not r.ok]
    parts = [f"{len(broken)} of {chains} chains broken ({events} events)"] if broken else []
    if differing:
        rows = sum(r.mismatched for r in differing)
        one = rows == 1
        parts.append(
            f"{rows} stored {'row' if one else 'rows'} of {len(differing)} "
            f"{'run' if len(differing) == 1 else 'runs'} {'differs' if one else 'differ'} "
            f"from {'its' if one else 'their'} events"
        )
    problems = [str(p) for p in broken]
    for run in differing:
        problems.extend(str(m) for m in run.mismatches)
        if run.mismatched > len(run.mismatches):
            more = run.mismatched - len(run.mismatches)
            problems.append(f"run {run.run_id}: {more} more rows differ from their events")
    return ChainSummary(False, "; ".join(parts), tuple(problems), unanchored, notes)


def _notes(report: VerifyReport) -> tuple[str, ...]:
    notes = []
    if report.unaudited:
        notes.append(
            f"{len(report.unaudited)} run(s) made with the audit off: their rows are not checked"
        )
    unhashed = sum(r.unhashed for r in report.runs)
    if unhashed:
        notes.append(
            f"{unhashed} stored rows recorded by events older than row hashes: not checked"
        )
    unaudited = sum(r.unaudited for r in report.runs)
    if unaudited:
        notes.append(f"{unaudited} stored rows of runs submitted with the audit off: not checked")
    closed = sum(r.closed for r in report.runs)
    if closed:
        notes.append(
            f"{closed} cancelled rows written by a cancel without an event: checked to hold "
            "no answer"
        )
    return tuple(notes)


@dataclass(frozen=True)
class TraceStage:
    """One stage of an item's trace and its fields, in the order they happened."""

    name: str
    fields: dict[str, Any]


#: Result payload stages shown as their own section, in the order they happen.
_STAGES_BEFORE = ("render", "preflight", "routing")
_STAGES_AFTER = ("response", "validation", "masking")


def trace_stages(trace: AuditTrace) -> list[TraceStage]:
    """render, preflight, routing, each attempt, response, validation, (masking), final."""
    result = trace.result
    p: dict[str, Any] = dict(trace.stages)
    stages: list[TraceStage] = []
    for name in _STAGES_BEFORE:
        fields = dict(p.get(name) or {})
        if name == "render" and p.get("version_id"):
            fields = {"template version id": p["version_id"], **fields}
        if name == "routing" and trace.bucket is not None:
            fields["assignment bucket"] = trace.bucket
        if fields:
            stages.append(TraceStage(name, fields))
    for attempt in trace.attempts:
        number = attempt.get("attempt", "?")
        stages.append(TraceStage(f"attempt {number}", attempt))
    for name in _STAGES_AFTER:
        if p.get(name):
            stages.append(TraceStage(name, dict(p[name])))
    if result is not None:
        final: dict[str, Any] = {
            k: p[k] for k in ("status", "error_kind", "error_message", "attempts") if k in p
        }
        final["at"] = result.at.isoformat(timespec="milliseconds")
        if trace.result_verified is not None:
            final["stored result matches its hash"] = trace.result_verified
        stages.append(TraceStage("final", final))
    return stages


def stage_rows(stage: TraceStage) -> list[dict[str, str]]:
    """A stage's fields as (field, value) rows; nested values as compact JSON; fields
    with no value (no rules, no check errors) left out."""
    return [
        {"field": name, "value": value if isinstance(value, str) else json.dumps(value)}
        for name, value in stage.fields.items()
        if value is not None
    ]


@dataclass(frozen=True)
class TimelineBar:
    """A span on the trace's time axis: a wait, an attempt, or the final result."""

    label: str
    kind: str  # "wait", "attempt" or "result"
    start: datetime
    end: datetime
    status: str | None
    detail: str


def _when(value: Any) -> datetime | None:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


#: Shorter waits (a limiter's bookkeeping) are listed with their attempt, not drawn.
MIN_WAIT_MS = 1.0


def timeline_bars(trace: AuditTrace) -> list[TimelineBar]:
    """Each attempt with the wait before it (and why), then the result, in time order."""
    bars: list[TimelineBar] = []
    for a in trace.attempts:
        start, end = _when(a.get("started_at")), _when(a.get("ended_at"))
        if start is None or end is None:
            continue
        number = a.get("attempt", "?")
        wait_ms = float(a.get("wait_ms") or 0)
        if wait_ms >= MIN_WAIT_MS:
            reason = a.get("wait_reason") or "wait"
            bars.append(
                TimelineBar(
                    f"wait {number}",
                    "wait",
                    start - timedelta(milliseconds=wait_ms),
                    start,
                    None,
                    f"waited {wait_ms:.0f} ms before attempt {number} ({reason})",
                )
            )
        status = str(a.get("status") or "")
        error = f" {a['error_kind']}: {a.get('error_message')}" if a.get("error_kind") else ""
        bars.append(
            TimelineBar(
                f"attempt {number}",
                "attempt",
                start,
                end,
                status,
                f"attempt {number}: {status}{error}",
            )
        )
    result = trace.result
    if result is not None:
        status = str(trace.stages.get("status") or "")
        last_end = max((b.end for b in bars), default=result.at)
        start = min(last_end, result.at)
        bars.append(
            TimelineBar(
                "result",
                "result",
                start,
                result.at,
                status,
                f"result: {status} after {trace.stages.get('attempts')} attempt(s)",
            )
        )
    return bars
