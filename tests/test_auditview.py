"""The Audit page's rows and figure, from hand-made events (no store, no Streamlit)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from promptlab.audit.chain import AuditEvent, AuditTrace
from promptlab.audit.report import ChainProblem, ChainStatus, VerifyReport
from promptlab.views.audit import (
    TraceStage,
    chain_summary,
    event_rows,
    stage_rows,
    timeline_bars,
    trace_stages,
)
from promptlab.views.audit_charts import trace_timeline_chart

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def event(kind: str, seq: int, at: datetime, payload: dict[str, object]) -> AuditEvent:
    return AuditEvent(
        "run:r1", seq, f"e{seq}", "k1", "r1", kind, "engine", at, json.dumps(payload), "p", "h"
    )


def retried() -> AuditTrace:
    first = {
        "attempt": 1,
        "status": "error",
        "error_kind": "server",
        "error_message": "500",
        "started_at": (T0 + timedelta(milliseconds=5)).isoformat(),
        "ended_at": (T0 + timedelta(milliseconds=30)).isoformat(),
        "wait_ms": 5,
        "wait_reason": "limiter",
    }
    second = {
        "attempt": 2,
        "status": "ok",
        "wait_ms": 100,
        "wait_reason": "backoff",
        "started_at": (T0 + timedelta(milliseconds=130)).isoformat(),
        "ended_at": (T0 + timedelta(milliseconds=180)).isoformat(),
    }
    result = {
        "status": "succeeded",
        "attempts": 2,
        "version_id": "sha256:v",
        "model": "m",
        "render": {"ref": "p@1", "semver": "1", "prompt_hash": "ph", "variables_hash": "vh"},
        "preflight": {"prompt_tokens": 3},
        "routing": {"endpoint": "e", "model": "m"},
        "response": {"finish_reason": "stop"},
        "attempt": second,
        "output": "hi",
    }
    return AuditTrace(
        "k1",
        "r1",
        (
            event("attempt", 1, T0 + timedelta(milliseconds=30), first),
            event("result", 2, T0 + timedelta(milliseconds=181), result),
        ),
        bucket=42,
    )


def test_stages_come_in_the_order_they_happened_with_their_fields() -> None:
    stages = trace_stages(retried())
    assert [s.name for s in stages] == [
        "render",
        "preflight",
        "routing",
        "attempt 1",
        "attempt 2",
        "response",
        "final",
    ]
    assert stages[0].fields["template version id"] == "sha256:v"
    assert stages[2].fields["assignment bucket"] == 42
    assert stages[4].fields["wait_reason"] == "backoff"
    assert stages[-1].fields["status"] == "succeeded"


def test_the_timeline_has_each_wait_and_attempt_then_the_result() -> None:
    bars = timeline_bars(retried())
    assert [b.label for b in bars] == ["wait 1", "attempt 1", "wait 2", "attempt 2", "result"]
    assert bars[2].end - bars[2].start == timedelta(milliseconds=100)
    figure = trace_timeline_chart(bars)
    (trace,) = figure.data
    assert list(trace.y) == [b.label for b in bars]
    assert list(trace.base)[:4] == [0.0, 5.0, 30.0, 130.0]  # ms after the first wait began
    assert list(trace.x)[3] == 50.0


def test_a_broken_chain_is_named_and_an_intact_log_counted() -> None:
    ok = ChainStatus("changes", 3, 3, "h", True)
    problem = ChainProblem("run:r1", 4, "e4", "modified", "its content no longer matches")
    broken = ChainStatus("run:r1", 9, 3, "h", True, problem)
    assert chain_summary(VerifyReport((ok,))).headline == "All 1 chain verified (3 events)"
    summary = chain_summary(VerifyReport((ok, broken)))
    assert not summary.ok and summary.headline == "1 of 2 chains broken (12 events)"
    assert summary.problems == (
        "chain run:r1: event seq 4 (e4) modified: its content no longer matches",
    )


def test_event_rows_carry_the_filtered_fields() -> None:
    (row,) = event_rows(retried().events[1:])
    assert (row["kind"], row["status"], row["model"], row["version"]) == (
        "result",
        "succeeded",
        "m",
        "sha256:v",
    )


def test_stage_rows_leave_out_empty_fields() -> None:
    rows = stage_rows(
        TraceStage(
            "validation",
            {"check_status": "valid", "rule_status": None, "check_errors": ["$.a: missing"]},
        )
    )
    assert rows == [
        {"field": "check_status", "value": "valid"},
        {"field": "check_errors", "value": '["$.a: missing"]'},
    ]
