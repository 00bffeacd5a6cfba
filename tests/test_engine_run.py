"""The engine end to end with an in-process scripted provider and a real DuckDB file."""

from __future__ import annotations

import csv
import threading
import time
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import promptlab.engine.executor as executor
from promptlab.engine import Engine, RunSpec, parse_spec
from promptlab.engine.testing import ManualClock, ScriptedProvider
from promptlab.errors import ConfigError, ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig
from promptlab.store import ItemStore, RunStore, Store

TEMPLATE = [{"role": "user", "content": "Summarize: {{ text }}"}]


def write_dataset(path: Path, rows: int) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text"])
        for i in range(rows):
            writer.writerow([f"row {i}"])
    return path


def make_spec(dataset: Path, variants: int = 1, **extra: Any) -> RunSpec:
    data: dict[str, Any] = {
        "name": "test",
        "dataset": str(dataset),
        "variants": [
            {
                "name": f"v{i}",
                "messages": TEMPLATE,
                "model": "fake:m1",
                "params": {"max_tokens": 20},
            }
            for i in range(variants)
        ],
        "retry": {"backoff_base_s": 0.01, "backoff_cap_s": 0.05, "timeout_s": 5},
    }
    data.update(extra)
    return parse_spec(data)


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider()


@pytest.fixture
def engine(store: Store, provider: ScriptedProvider) -> Iterator[Engine]:
    endpoints = {
        "fake": EndpointConfig(
            "fake", "openai", rpm=60_000, concurrency=16, context_windows={"m1": 4000}
        )
    }
    with Engine(store, endpoints=endpoints, provider_factory=lambda _cfg: provider) as eng:
        yield eng


def final_rows(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    with store.read() as cur:
        return cur.execute(
            "SELECT idempotency_key, status, error_kind, attempts FROM results WHERE run_id = ?",
            [run_id],
        ).fetchall()


def attempts(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    with store.read() as cur:
        return cur.execute(
            "SELECT attempt, outcome, error_kind, wait_reason, wait_ms FROM attempts "
            "WHERE run_id = ? ORDER BY started_at",
            [run_id],
        ).fetchall()


def test_a_run_completes_with_one_final_row_per_item(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 60), variants=2, repeats=2))
    progress = engine.wait(run_id, timeout=60)
    assert progress.status == "completed"
    assert progress.total == progress.succeeded == 240
    rows = final_rows(store, run_id)
    assert len(rows) == len({r[0] for r in rows}) == 240
    assert sum(provider.calls.values()) == 240 and max(provider.calls.values()) == 1
    with store.read() as cur:
        row = cur.execute(
            "SELECT prompt_version_id, model, endpoint, output_text, input_tokens, finish_reason, "
            "model_version, latency_ms, cost_usd, params FROM results WHERE run_id = ? LIMIT 1",
            [run_id],
        ).fetchone()
    assert row is not None
    assert row[0].startswith("sha256:") and row[1] == "m1" and row[2] == "fake"
    assert row[3].startswith("answer to") and row[4] > 0 and row[5] == "stop"
    assert row[6] == "m1-scripted" and row[8] == 0.0 and '"max_tokens": 20' in row[9]
    statuses = [e[0] for e in RunStore(store).events(run_id)]
    assert statuses == ["submitted", "scheduled", "running", "completed"]


def test_transient_errors_are_retried_with_backoff_recorded(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    provider.script.extend(
        [
            ProviderError(ErrorKind.SERVER, "boom", status=500),
            ProviderError(ErrorKind.TIMEOUT, "slow"),
            ProviderError(ErrorKind.CONNECTION, "reset"),
            ProviderError(ErrorKind.OVERLOADED, "busy", status=529, retry_after_s=0.01),
            ProviderError(ErrorKind.BAD_REQUEST, "conflict", status=409),
        ]
    )
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 1)))
    assert engine.wait(run_id, timeout=30).status == "completed"
    rows = attempts(store, run_id)
    assert [r[1] for r in rows] == ["error"] * 5 + ["ok"]
    assert [r[2] for r in rows[:5]] == [
        "server",
        "timeout",
        "connection",
        "overloaded",
        "bad_request",
    ]
    assert rows[1][3] == "backoff" and rows[1][4] > 0
    assert rows[4][3] == "gate"  # after the 529 the shared gate held it
    assert final_rows(store, run_id)[0][1:] == ("succeeded", None, 6)


def test_attempts_run_out_and_the_item_fails_with_its_kind(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    provider.fault = lambda _req, _n: ProviderError(ErrorKind.SERVER, "down", status=503)
    spec = make_spec(
        write_dataset(tmp_path / "d.csv", 2), retry={"max_attempts": 3, "backoff_base_s": 0.01}
    )
    run_id = engine.submit(spec)
    assert engine.wait(run_id, timeout=30).status == "completed"
    assert sorted(r[1:] for r in final_rows(store, run_id)) == [("failed", "server", 3)] * 2


@pytest.mark.parametrize(
    "error",
    [
        ProviderError(ErrorKind.BAD_REQUEST, "bad", status=400),
        ProviderError(ErrorKind.BAD_REQUEST, "unprocessable", status=422),
        ProviderError(ErrorKind.NOT_FOUND, "no model", status=404),
        ProviderError(ErrorKind.CONTEXT_LENGTH, "too long", status=400),
        ProviderError(ErrorKind.CONTENT_FILTER, "filtered", status=400),
    ],
)
def test_permanent_errors_fail_at_once(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider, error: ProviderError
) -> None:
    provider.script.append(error)
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 1)))
    assert engine.wait(run_id, timeout=30).status == "completed"
    assert final_rows(store, run_id) == [
        (final_rows(store, run_id)[0][0], "failed", error.kind.value, 1)
    ]


@pytest.mark.parametrize("kind", [ErrorKind.QUOTA, ErrorKind.AUTH])
def test_quota_and_auth_stop_the_run_with_the_reason(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider, kind: ErrorKind
) -> None:
    provider.fault = lambda _req, _n: ProviderError(kind, "you shall not pass", status=429)
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 200)))
    progress = engine.wait(run_id, timeout=30)
    assert progress.status == "failed"
    assert progress.reason is not None and kind.value in progress.reason
    assert "you shall not pass" in progress.reason
    rows = final_rows(store, run_id)
    assert len(rows) == 200  # every item still has its one final row
    assert {r[1] for r in rows} == {"failed", "cancelled"}
    assert sum(provider.calls.values()) < 200  # dispatching stopped


def test_an_adapter_bug_on_every_item_stops_the_run_and_logs_one_traceback(
    engine: Engine,
    store: Store,
    tmp_path: Path,
    provider: ScriptedProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What anthropic 2.14 did to the old adapter: a TypeError before any request left.
    provider.bug = TypeError("create() got an unexpected keyword argument 'temperature'")
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 200)))
    progress = engine.wait(run_id, timeout=30)
    assert progress.status == "failed"
    assert progress.reason is not None and progress.reason.startswith("stopped: internal:")
    assert "unexpected keyword argument 'temperature'" in progress.reason
    assert sum(provider.calls.values()) < 200  # dispatching stopped
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1

    provider.bug = None  # the adapter is fixed: resume sends the failed items again
    engine.resume(run_id)
    progress = engine.wait(run_id, timeout=30)
    assert progress.status == "completed" and progress.succeeded == 200


def test_throttles_close_the_shared_gate_and_every_item_gets_through(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    provider.rpm = 3000  # the server's bucket starts empty: the first burst meets 429s
    provider.retry_after_s = 0.05
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 100)))
    assert engine.wait(run_id, timeout=60).status == "completed"
    assert provider.throttled > 0
    rows = attempts(store, run_id)
    assert any(r[2] == "rate_limit" for r in rows)
    assert any(r[3] == "gate" for r in rows)
    assert {r[1] for r in final_rows(store, run_id)} == {"succeeded"}
    assert engine.status(run_id).succeeded == 100


def test_invalid_rows_and_oversized_prompts_fail_without_being_sent(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(
        '{"text": "fine"}\n{"other": "no text"}\n{"text": "' + "long " * 5000 + '"}\n'
    )
    run_id = engine.submit(make_spec(dataset))
    assert engine.wait(run_id, timeout=30).status == "completed"
    kinds = sorted((r[1], r[2]) for r in final_rows(store, run_id))
    assert kinds == [("failed", "context_length"), ("failed", "invalid_input"), ("succeeded", None)]
    assert sum(provider.calls.values()) == 1


def test_cancel_stops_dispatch_and_lets_in_flight_requests_finish(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    provider.hold_requests()
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 100)))
    while engine.status(run_id).in_flight < 16:  # concurrency 16: all slots taken, then held
        engine.wait(run_id, timeout=0.05)
    engine.cancel(run_id)
    provider.release_requests()
    progress = engine.wait(run_id, timeout=30)
    assert progress.status == "cancelled"
    assert progress.succeeded == 16 and progress.cancelled == 84
    assert sum(provider.calls.values()) == 16
    assert len(final_rows(store, run_id)) == 100

    resumed = engine.resume(run_id)  # the cancelled items are sent now, the others are not
    assert engine.wait(resumed, timeout=30).status == "completed"
    assert sum(provider.calls.values()) == 100 and max(provider.calls.values()) == 1
    rows = final_rows(store, run_id)
    assert len(rows) == 100 and {r[1] for r in rows} == {"succeeded"}


def test_resume_pressed_twice_at_once_starts_the_run_once(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    import threading

    provider.latency_s = 0.05  # slow enough to cancel before the end, and to stay busy
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 40)))
    engine.cancel(run_id)
    assert engine.wait(run_id, timeout=30).status == "cancelled"
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def press() -> None:
        barrier.wait()
        try:
            engine.resume(run_id)
            outcomes.append("started")
        except Exception as exc:  # noqa: BLE001 - the outcome is what we count
            outcomes.append(str(exc))

    presses = [threading.Thread(target=press) for _ in range(2)]
    for thread in presses:
        thread.start()
    for thread in presses:
        thread.join()
    assert sorted(outcomes) == sorted(["started", f"run {run_id} is already running"])
    assert engine.wait(run_id, timeout=30).status == "completed"
    assert max(provider.calls.values()) == 1  # no item was sent twice
    assert len(final_rows(store, run_id)) == 40


def test_cancel_while_a_resume_is_starting_leaves_the_run_cancelled(
    store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    endpoints = {"fake": EndpointConfig("fake", "openai", rpm=60_000, concurrency=4)}
    provider.latency_s = 0.05
    with Engine(store, endpoints=endpoints, provider_factory=lambda _c: provider) as first:
        run_id = first.submit(make_spec(write_dataset(tmp_path / "d.csv", 40)))
        first.cancel(run_id)
        assert first.wait(run_id, timeout=30).status == "cancelled"

    def build_then_cancel(_cfg: EndpointConfig) -> ScriptedProvider:
        # The resume builds its provider while it holds the run: press Cancel right then.
        second.cancel(run_id)
        return provider

    second = Engine(store, endpoints=endpoints, provider_factory=build_then_cancel)
    with second:
        second.resume(run_id)
        progress = second.wait(run_id, timeout=30)
    assert progress.status == "cancelled"
    # Every item planned is closed (a cancel taken while planning may leave none planned).
    assert progress.done == progress.total and progress.succeeded < 40


def test_one_broken_adapter_stops_the_run_while_another_endpoint_answers(
    store: Store, tmp_path: Path
) -> None:
    # The good endpoint answers many times between two failures of the broken one.
    good = ScriptedProvider(name="good", latency_s=0.002)
    broken = ScriptedProvider(name="broken", latency_s=0.02, bug=TypeError("adapter bug"))
    endpoints = {
        "good": EndpointConfig("good", "openai", concurrency=4),
        "broken": EndpointConfig("broken", "openai", concurrency=1),
    }
    spec = make_spec(write_dataset(tmp_path / "d.csv", 200))
    data = dict(spec.raw)
    data["variants"] = [
        {**data["variants"][0], "name": "ok", "model": "good:m"},
        {**data["variants"][0], "name": "bad", "model": "broken:m"},
    ]
    providers = {"good": good, "broken": broken}
    with Engine(store, endpoints=endpoints, provider_factory=lambda c: providers[c.name]) as e:
        run_id = e.submit(parse_spec(data))
        progress = e.wait(run_id, timeout=30)
    assert progress.status == "failed", progress
    assert progress.reason is not None and "the broken adapter failed" in progress.reason
    # Stopped at its third failure in a row, though answers from `good` came in between.
    assert sum(broken.calls.values()) <= 4


def test_a_cancel_pressed_during_a_resume_that_fails_still_cancels(
    store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    endpoints = {"fake": EndpointConfig("fake", "openai", concurrency=4)}
    provider.latency_s = 0.05
    with Engine(store, endpoints=endpoints, provider_factory=lambda _c: provider) as first:
        run_id = first.submit(make_spec(write_dataset(tmp_path / "d.csv", 40)))
        first.cancel(run_id)
        first.wait(run_id, timeout=30)
    ItemStore(store).reopen(run_id, [])  # as if the process had died mid-run
    with store.transaction() as tx:  # (not a move the lifecycle makes: written as is)
        tx.execute("UPDATE runs SET status = 'running' WHERE run_id = ?", [run_id])

    def cancel_then_fail(_cfg: EndpointConfig) -> ScriptedProvider:
        second.cancel(run_id)  # pressed while the resume holds the run
        raise ConfigError("the providers file went bad")

    second = Engine(store, endpoints=endpoints, provider_factory=cancel_then_fail)
    with second, pytest.raises(ConfigError):
        second.resume(run_id)
    with second:
        assert second.status(run_id).status == "cancelled"  # the Cancel was not lost


def test_a_specs_limits_cap_only_its_own_run(
    engine: Engine, tmp_path: Path, provider: ScriptedProvider
) -> None:
    provider.latency_s = 0.1  # long enough for every admitted request to overlap
    dataset = write_dataset(tmp_path / "d.csv", 40)
    capped = engine.submit(make_spec(dataset, limits={"fake": {"concurrency": 2, "rpm": 600}}))
    assert engine.wait(capped, timeout=30).status == "completed"
    assert provider.max_in_flight == 2

    # A later run without limits gets the endpoint's configured budget (concurrency 16),
    # not what the earlier spec asked for.
    provider.max_in_flight = 0
    free = engine.submit(make_spec(dataset))
    assert engine.wait(free, timeout=30).status == "completed"
    assert provider.max_in_flight == 16

    # A spec asking for more than the shared budget stays inside it.
    provider.max_in_flight = 0
    greedy = engine.submit(make_spec(dataset, limits={"fake": {"concurrency": 32}}))
    assert engine.wait(greedy, timeout=30).status == "completed"
    assert provider.max_in_flight == 16


def test_two_runs_share_one_endpoint_budget(
    engine: Engine, tmp_path: Path, provider: ScriptedProvider
) -> None:
    provider.latency_s = 0.02
    first = engine.submit(make_spec(write_dataset(tmp_path / "a.csv", 80)))
    second = engine.submit(make_spec(write_dataset(tmp_path / "b.csv", 80)))
    assert engine.wait(first, timeout=60).status == "completed"
    assert engine.wait(second, timeout=60).status == "completed"
    assert provider.max_in_flight == 16  # one concurrency cap for both runs, fully used


def test_status_of_a_run_from_another_engine_comes_from_the_store(
    engine: Engine, store: Store, tmp_path: Path
) -> None:
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 5)))
    engine.wait(run_id, timeout=30)
    other = Engine(store, endpoints={}, provider_factory=lambda _cfg: ScriptedProvider())
    try:
        progress = other.status(run_id)
        assert (progress.status, progress.succeeded, progress.active) == ("completed", 5, False)
        assert [p.run_id for p in other.list_runs()] == [run_id]
    finally:
        other.close()


def test_requests_carry_the_idempotency_key(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    seen: list[CompletionRequest] = []

    def spy(request: CompletionRequest, _n: int) -> None:
        seen.append(request)
        return None

    provider.fault = spy
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 3)))
    engine.wait(run_id, timeout=30)
    keys = {r[0] for r in final_rows(store, run_id)}
    assert {r.request_id for r in seen} == keys
    assert all(r.messages[0]["content"].startswith("Summarize: row") for r in seen)


def test_records_are_stamped_by_the_engines_clock(
    store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    endpoints = {"fake": EndpointConfig("fake", "openai")}  # unlimited: no waits to sleep out
    with Engine(
        store, endpoints=endpoints, provider_factory=lambda _c: provider, clock=clock
    ) as engine:
        run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 3)))
        assert engine.wait(run_id, timeout=30).status == "completed"
    with store.read() as cur:
        stamps = cur.execute(
            "SELECT DISTINCT a.started_at, a.ended_at, r.finished_at FROM attempts a "
            "JOIN results r USING (idempotency_key) WHERE a.run_id = ?",
            [run_id],
        ).fetchall()
    assert [tuple(t.astimezone(UTC) for t in row) for row in stamps] == [
        (clock.now(), clock.now(), clock.now())
    ]


@pytest.mark.parametrize("supports", [True, False])
def test_an_output_schema_is_sent_only_to_providers_that_support_one(
    engine: Engine, tmp_path: Path, provider: ScriptedProvider, supports: bool
) -> None:
    provider.supports_json_schema = supports
    seen: list[CompletionRequest] = []
    provider.fault = lambda request, _n: seen.append(request)  # type: ignore[func-returns-value]
    schema = {"type": "object", "properties": {"label": {"type": "string"}}}
    spec = make_spec(write_dataset(tmp_path / "d.csv", 2))
    data = dict(spec.raw)
    data["variants"] = [{**data["variants"][0], "output_schema": schema}]
    run_id = engine.submit(parse_spec(data))
    assert engine.wait(run_id, timeout=30).status == "completed"
    assert [r.output_schema for r in seen] == ([schema] * 2 if supports else [None, None])


def test_scripted_errors_are_raised_in_order_one_per_attempt(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    provider.script = deque(
        [ProviderError(ErrorKind.SERVER, "first"), ProviderError(ErrorKind.TIMEOUT, "second")]
    )
    run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 1)))
    assert engine.wait(run_id, timeout=30).status == "completed"
    with store.read() as cur:
        rows = cur.execute(
            "SELECT attempt, error_kind, outcome FROM attempts WHERE run_id = ? ORDER BY attempt",
            [run_id],
        ).fetchall()
    assert rows == [(1, "server", "error"), (2, "timeout", "error"), (3, None, "ok")]
    assert not provider.script


def test_params_can_come_from_dataset_columns_row_by_row(
    engine: Engine, store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    seen: dict[str, CompletionRequest] = {}
    provider.fault = lambda request, _n: seen.update({request.request_id or "": request})  # type: ignore[func-returns-value]
    dataset = tmp_path / "d.csv"
    dataset.write_text("text,budget\nshort,16\nlong,300\nblank,\nbad,lots\n")
    data = dict(make_spec(dataset).raw)
    data["variants"] = [{**data["variants"][0], "params_from": {"max_tokens": "budget"}}]
    run_id = engine.submit(parse_spec(data))
    assert engine.wait(run_id, timeout=30).status == "completed"
    with store.read() as cur:
        rows = cur.execute(
            "SELECT row_index, idempotency_key, status, error_message, params FROM results "
            "WHERE run_id = ? ORDER BY row_index",
            [run_id],
        ).fetchall()
    sent = [seen[key].max_tokens if key in seen else None for _, key, *_ in rows]
    assert sent == [16, 300, 20, None]  # a blank cell keeps the variant's own max_tokens
    assert rows[3][2] == "failed" and "column 'budget' (max_tokens): 'lots'" in rows[3][3]
    assert '"max_tokens": 300' in rows[1][4]  # the params actually sent are recorded


class _SlowPlanning(ItemStore):
    """Planning that is still writing when the engine is closed."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.started, self.finished = threading.Event(), threading.Event()

    def plan_items(self, run_id: str, chunks: Any) -> int:
        self.started.set()
        time.sleep(1.0)
        try:
            return super().plan_items(run_id, chunks)
        finally:
            self.finished.set()


def test_close_returns_only_once_the_store_calls_of_a_run_it_gave_up_on_have_ended(
    store: Store, tmp_path: Path, provider: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whoever closes the store next (the Workbench, a test's fixture) must not find its
    # connection busy with a call from the engine's threads.
    items = _SlowPlanning(store)
    endpoints = {"fake": EndpointConfig("fake", "openai", rpm=60_000, concurrency=4)}
    engine = Engine(store, endpoints=endpoints, provider_factory=lambda _cfg: provider, items=items)
    engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 3)))
    assert items.started.wait(10)
    monkeypatch.setattr(executor, "CALL_TIMEOUT_S", 0.1)  # close gives up on the run at once
    engine.close()
    assert items.finished.is_set()


class _RewrittenWhilePlanning(ItemStore):
    """The dataset is rewritten (emptied) after submit counted it, before planning reads
    it: the first time only."""

    def __init__(self, store: Store, dataset: Path) -> None:
        super().__init__(store)
        self.dataset, self.saved = dataset, dataset.read_text()

    def plan_items(self, run_id: str, chunks: Any) -> int:
        if self.saved:
            self.dataset.write_text("text\n")
            self.saved = ""
        return super().plan_items(run_id, chunks)


def test_a_dataset_rewritten_between_submit_and_planning_fails_the_run_and_resume_replans(
    store: Store, tmp_path: Path, provider: ScriptedProvider
) -> None:
    dataset = write_dataset(tmp_path / "d.csv", 3)
    items = _RewrittenWhilePlanning(store, dataset)
    endpoints = {"fake": EndpointConfig("fake", "openai", rpm=60_000, concurrency=4)}
    factory = lambda _cfg: provider  # noqa: E731
    with Engine(store, endpoints=endpoints, provider_factory=factory, items=items) as engine:
        run_id = engine.submit(make_spec(dataset))
        failed = engine.wait(run_id, timeout=30)
        assert failed.status == "failed"  # not "completed" with no items
        assert failed.reason == (
            f"dataset {dataset}: changed while the run was being planned (3 rows when it "
            "was submitted, 0 read to plan it); nothing was sent: resume the run to plan "
            "it again"
        )
        assert not provider.calls
        write_dataset(dataset, 3)
        engine.resume(run_id)
        assert engine.wait(run_id, timeout=30).status == "completed"
    assert sorted(row[1] for row in final_rows(store, run_id)) == ["succeeded"] * 3
