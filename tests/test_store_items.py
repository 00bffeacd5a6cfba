"""ItemStore: planning, the batched writer, reopen and cancel, on a real DuckDB file."""

from __future__ import annotations

from datetime import UTC, datetime

from promptlab.engine.plan.planner import AllVariants, plan_items
from promptlab.records import AttemptRow, FinalRow, VariantRecord, WriteBatch
from promptlab.store import ItemStore, RunStore, Store

RUN = "run_items"
AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def planned_run(store: Store, rows: int = 3) -> list[str]:
    """A run of `rows` dataset rows and one variant; return its item keys in plan order."""
    variant = VariantRecord(0, "v", "p@1.0.0", "sha256:p", "fake", "m", {}, {})
    RunStore(store).create_run(RUN, "items", {}, [variant])
    items = ItemStore(store)
    items.plan_items(
        RUN, plan_items(RUN, [{"text": f"row {i}"} for i in range(rows)], ["v"], AllVariants(1), 1)
    )
    return [item.key for item in items.pending_chunk(RUN, -1, [0], rows)]


def succeeded(key: str, seq: int) -> FinalRow:
    return FinalRow(
        key=key,
        run_id=RUN,
        seq=seq,
        row_index=seq,
        variant="v",
        repeat=0,
        status="succeeded",
        prompt_version_id="sha256:p",
        endpoint="fake",
        model="m",
        params={},
        attempts=1,
        finished_at=AT,
        output_text="late answer",
        input_tokens=3,
        output_tokens=4,
        latency_ms=12.0,
    )


def attempt(key: str) -> AttemptRow:
    return AttemptRow(
        key=key,
        run_id=RUN,
        attempt=1,
        started_at=AT,
        ended_at=AT,
        outcome="ok",
        error_kind=None,
        http_status=200,
        error_message=None,
        wait_ms=0.0,
        wait_reason=None,
        retry_after_s=None,
        latency_ms=12.0,
    )


def test_an_answer_after_cancel_is_kept_as_an_attempt_only(store: Store) -> None:
    keys = planned_run(store)
    items = ItemStore(store)
    assert items.cancel_open_items(RUN, "run cancelled") == 3

    late = keys[1]
    items.write_batch(
        WriteBatch(dispatched=[late], attempts=[attempt(late)], finals=[succeeded(late, 1)])
    )

    with store.read() as cur:
        item = cur.execute(
            "SELECT status, attempts FROM items WHERE idempotency_key = ?", [late]
        ).fetchone()
        results = cur.execute(
            "SELECT status, output_text FROM results WHERE idempotency_key = ?", [late]
        ).fetchall()
        attempts = cur.execute(
            "SELECT attempt, outcome FROM attempts WHERE idempotency_key = ?", [late]
        ).fetchall()
    assert item == ("cancelled", 0)  # the item agrees with its one final row
    assert results == [("cancelled", None)]
    assert attempts == [(1, "ok")]  # the late answer is not lost: it is an attempt


def test_an_open_item_takes_its_final_row(store: Store) -> None:
    keys = planned_run(store)
    items = ItemStore(store)
    items.write_batch(WriteBatch(dispatched=[keys[0]]))
    items.write_batch(WriteBatch(attempts=[attempt(keys[0])], finals=[succeeded(keys[0], 0)]))
    # A second final row for the same item (a duplicate delivery) changes nothing.
    items.write_batch(WriteBatch(finals=[succeeded(keys[0], 0)]))
    with store.read() as cur:
        statuses = cur.execute("SELECT status FROM items ORDER BY seq").fetchall()
        results = cur.execute(
            "SELECT idempotency_key, status FROM results WHERE run_id = ?", [RUN]
        ).fetchall()
    assert statuses == [("succeeded",), ("pending",), ("pending",)]
    assert results == [(keys[0], "succeeded")]


def test_two_final_rows_for_one_item_in_one_batch_keep_the_first(store: Store) -> None:
    keys = planned_run(store)
    first = succeeded(keys[2], 2)
    second = FinalRow(**{**first.__dict__, "status": "failed", "error_kind": "server"})
    ItemStore(store).write_batch(WriteBatch(finals=[first, second]))
    with store.read() as cur:
        item = cur.execute(
            "SELECT status, error_kind FROM items WHERE idempotency_key = ?", [keys[2]]
        ).fetchone()
        results = cur.execute(
            "SELECT status, error_kind FROM results WHERE idempotency_key = ?", [keys[2]]
        ).fetchall()
    assert item == ("succeeded", None)
    assert results == [("succeeded", None)]


def test_a_cancel_while_another_run_writes_still_cancels(store: Store) -> None:
    # Runs cancelled at once from several sessions: one cancel's CHECKPOINT met another's
    # open write and failed, and the run ended `failed` instead of `cancelled`.
    keys = planned_run(store)
    with store.read() as other:
        other.execute("BEGIN TRANSACTION")
        other.execute(
            "INSERT INTO alerts (run_id, variant, kind, message, first_seq, last_seq, raised_at) "
            "VALUES ('elsewhere', 'v', 'k', 'm', 0, 0, now())"
        )
        cancelled = ItemStore(store).cancel_open_items(RUN, "run cancelled")
        other.execute("COMMIT")
    assert cancelled == len(keys)
    with store.read() as cur:
        statuses = cur.execute(
            "SELECT DISTINCT status FROM items WHERE run_id = ?", [RUN]
        ).fetchall()
    assert statuses == [("cancelled",)]
