"""ReadModels on a real DuckDB file with known rows: exact counts, percentiles and totals."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta

import pytest

from promptlab.engine.plan.planner import AllVariants, plan_items
from promptlab.records import (
    AttemptRow,
    FinalRow,
    ItemCounts,
    RunStatus,
    VariantRecord,
    VariantSummary,
    WriteBatch,
)
from promptlab.store import ItemStore, ReadModels, RunStore, Store

RUN = "run_reads"
AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
ROWS = 4
VARIANTS = [
    VariantRecord(0, "a", "greet@1.0.0", "sha256:a", "openai", "gpt-a", {}, {}),
    VariantRecord(1, "b", "greet@2.0.0", "sha256:b", "anthropic", "claude-b", {}, {}),
    VariantRecord(2, "c", "greet@3.0.0", "sha256:c", "openai", "gpt-c", {}, {}),
]


def final(key: str, seq: int, variant: VariantRecord, status: str, **extra: object) -> FinalRow:
    return FinalRow(
        key=key,
        run_id=RUN,
        seq=seq,
        row_index=seq // len(VARIANTS),
        variant=variant.name,
        repeat=0,
        status=status,
        prompt_version_id=variant.prompt_version_id,
        endpoint=variant.endpoint,
        model=variant.model,
        params={},
        attempts=1,
        finished_at=AT,
        **extra,  # type: ignore[arg-type]
    )


def attempt(key: str, error_kind: str | None = None) -> AttemptRow:
    return AttemptRow(
        key=key,
        run_id=RUN,
        attempt=1,
        started_at=AT,
        ended_at=AT,
        outcome="error" if error_kind else "ok",
        error_kind=error_kind,
        http_status=None,
        error_message=None,
        wait_ms=0.0,
        wait_reason=None,
        retry_after_s=None,
        latency_ms=None,
    )


@pytest.fixture
def run(store: Store) -> ReadModels:
    """4 rows x variants a, b, c (12 items), in plan order row by row.

    a: all 4 succeeded, latencies 10/20/30/40 ms, tokens 1-4 in and 10-40 out, $0.25 each.
    b: row 0 succeeded (100 ms, 5 in, 6 out, $0.50), row 1 failed (server, with a latency
       that must not count), row 2 cancelled, row 3 in flight.
    c: nothing sent yet (4 pending).
    """
    RunStore(store).create_run(RUN, "reads", {}, VARIANTS)
    items = ItemStore(store)
    rows = [{"text": f"row {i}"} for i in range(ROWS)]
    items.plan_items(RUN, plan_items(RUN, rows, ["a", "b", "c"], AllVariants(3), 1))
    keys = {(p.row_index, p.variant_index): p for p in items.pending_chunk(RUN, -1, [0, 1, 2], 99)}
    a, b, _ = VARIANTS
    finals = [
        final(
            keys[row, 0].key,
            keys[row, 0].seq,
            a,
            "succeeded",
            latency_ms=10.0 * (row + 1),
            input_tokens=row + 1,
            output_tokens=10 * (row + 1),
            cost_usd=0.25,
        )
        for row in range(ROWS)
    ]
    finals += [
        final(
            keys[0, 1].key,
            keys[0, 1].seq,
            b,
            "succeeded",
            latency_ms=100.0,
            input_tokens=5,
            output_tokens=6,
            cost_usd=0.5,
        ),
        final(
            keys[1, 1].key,
            keys[1, 1].seq,
            b,
            "failed",
            error_kind="server",
            error_message="boom",
            latency_ms=999.0,
        ),
        final(keys[2, 1].key, keys[2, 1].seq, b, "cancelled"),
    ]
    attempts = [attempt(f.key) for f in finals] + [attempt(keys[1, 1].key, "rate_limit")]
    items.write_batch(WriteBatch(dispatched=[keys[3, 1].key], attempts=attempts, finals=finals))
    return ReadModels(store)


def test_variant_summaries_are_exact_and_include_variants_without_results(
    run: ReadModels,
) -> None:
    a, b, c = run.variant_summaries(RUN)
    assert a == VariantSummary(
        variant_index=0,
        name="a",
        prompt_ref="greet@1.0.0",
        endpoint="openai",
        model="gpt-a",
        succeeded=4,
        failed=0,
        cancelled=0,
        open=0,
        completion_rate=1.0,
        latency_p50_ms=25.0,
        latency_p90_ms=pytest.approx(37.0),
        latency_p99_ms=pytest.approx(39.7),
        input_tokens=10,
        output_tokens=100,
        cost_usd=1.0,
        completed=4,  # rows without a check count as complete (stored before checks)
    )
    assert b == VariantSummary(
        variant_index=1,
        name="b",
        prompt_ref="greet@2.0.0",
        endpoint="anthropic",
        model="claude-b",
        succeeded=1,
        failed=1,
        cancelled=1,
        open=1,
        completion_rate=pytest.approx(1 / 3),
        latency_p50_ms=100.0,
        latency_p90_ms=100.0,
        latency_p99_ms=100.0,
        input_tokens=5,
        output_tokens=6,
        cost_usd=0.5,
        completed=1,
    )
    assert c == VariantSummary(
        variant_index=2,
        name="c",
        prompt_ref="greet@3.0.0",
        endpoint="openai",
        model="gpt-c",
        succeeded=0,
        failed=0,
        cancelled=0,
        open=4,
        completion_rate=None,
        latency_p50_ms=None,
        latency_p90_ms=None,
        latency_p99_ms=None,
        input_tokens=0,
        output_tokens=0,
        cost_usd=0.0,
    )
    assert (a.finished, b.finished, c.finished) == (4, 3, 0)


def test_variant_summaries_of_an_unknown_run_are_empty(run: ReadModels) -> None:
    assert run.variant_summaries("run_missing") == []


def test_summary_is_a_frozen_record_of_the_run(run: ReadModels) -> None:
    summary = run.summary(RUN)
    assert (summary.succeeded, summary.input_tokens, summary.output_tokens) == (5, 15, 106)
    assert summary.cost_usd == 1.5
    assert summary.latency_p50_ms == 30.0  # over 10, 20, 30, 40, 100
    assert summary.latency_p95_ms == pytest.approx(88.0)
    assert (summary.attempts, summary.rate_limited_attempts) == (8, 1)
    with pytest.raises(FrozenInstanceError):
        summary.attempts = 0  # type: ignore[misc]


def test_failures_and_item_counts(run: ReadModels) -> None:
    assert run.failure_kinds(RUN) == {"server": 1}
    [failure] = run.failure_examples(RUN)
    assert (failure.row_index, failure.variant, failure.error_kind) == (1, "b", "server")
    assert run.item_counts(RUN) == {
        "pending": 4,
        "in_flight": 1,
        "succeeded": 5,
        "failed": 1,
        "cancelled": 1,
    }


def test_runs_with_counts_newest_first_in_one_list(run: ReadModels, store: Store) -> None:
    runs = RunStore(store)
    runs.create_run("run_empty", "empty", {}, VARIANTS[:1])
    runs.set_status("run_empty", RunStatus.CANCELLED, "cancelled")
    # Submitted later than RUN: it is listed first, with no items at all.
    with store.transaction() as tx:
        tx.execute(
            "UPDATE runs SET submitted_at = submitted_at + ? WHERE run_id = 'run_empty'",
            [timedelta(seconds=1)],
        )
    newest, older = run.list_runs_with_counts(10)
    assert newest.run.run_id == "run_empty" and newest.run.status is RunStatus.CANCELLED
    assert newest.items == ItemCounts()
    assert older.run.run_id == RUN and older.run.total_items == 12
    assert older.items == ItemCounts(pending=4, in_flight=1, succeeded=5, failed=1, cancelled=1)
    assert (older.items.open, older.items.finished) == (5, 7)
    assert [r.run.run_id for r in run.list_runs_with_counts(1)] == ["run_empty"]
