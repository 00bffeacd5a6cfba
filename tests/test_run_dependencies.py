"""`after:`: a run waits for the newest runs of the names it gives, starts when they
complete, is skipped when one fails (and its dependents in turn), and is adopted by the
next long-lived owner when its process is gone."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from promptlab.engine import Engine
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import ErrorKind, ProviderError, SpecError
from promptlab.providers.config import EndpointConfig
from promptlab.records import RunStatus
from promptlab.store import RunStore, Store
from tests.test_engine_run import make_spec, write_dataset

ENDPOINTS = {"fake": EndpointConfig("fake", "openai", rpm=60_000, context_windows={"m1": 4000})}


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider()


def engine_on(store: Store, provider: ScriptedProvider) -> Engine:
    return Engine(store, endpoints=ENDPOINTS, provider_factory=lambda _cfg: provider)


@pytest.fixture
def engine(store: Store, provider: ScriptedProvider) -> Iterator[Engine]:
    with engine_on(store, provider) as eng:
        yield eng


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "rows.csv", 3)


def test_a_run_waits_then_starts_when_what_it_comes_after_completes(
    engine: Engine, provider: ScriptedProvider, dataset: Path
) -> None:
    provider.hold_requests()
    prep = engine.submit(make_spec(dataset, name="prep"))
    evaluate = engine.submit(make_spec(dataset, name="eval", after=["prep"]))
    report = engine.submit(make_spec(dataset, name="report", after=["prep", "eval"]))
    waiting = engine.status(evaluate)
    assert waiting.status == RunStatus.WAITING and not waiting.active
    assert (waiting.reason or "").startswith(f"after prep ({prep}, ")
    assert engine.status(report).status == RunStatus.WAITING

    provider.release_requests()
    assert engine.wait(prep, timeout=30).status == RunStatus.COMPLETED
    for run_id in (evaluate, report):
        _until_final(engine, run_id)
        assert engine.status(run_id).status == RunStatus.COMPLETED
        assert engine.status(run_id).succeeded == 3
    events = [s for s, _r, _at in RunStore(engine.store).events(report)]
    assert events[:3] == ["submitted", "waiting", "waiting"]  # eval still waited, then
    assert events[-1] == "completed"


def test_a_failed_dependency_skips_the_run_and_its_dependents_with_a_reason(
    engine: Engine, provider: ScriptedProvider, dataset: Path
) -> None:
    provider.hold_requests()
    provider.script = deque([ProviderError(ErrorKind.AUTH, "bad key", status=401)])
    prep = engine.submit(make_spec(dataset, name="prep"))
    evaluate = engine.submit(make_spec(dataset, name="eval", after="prep"))
    report = engine.submit(make_spec(dataset, name="report", after=["eval"]))
    provider.release_requests()
    assert engine.wait(prep, timeout=30).status == RunStatus.FAILED
    for run_id in (evaluate, report):
        _until_final(engine, run_id)
    skipped = engine.status(evaluate)
    assert skipped.status == RunStatus.FAILED and skipped.total == 0
    assert skipped.reason is not None and skipped.reason.startswith(
        f"skipped: prep ({prep}) failed"
    )
    assert engine.status(report).reason.startswith(f"skipped: eval ({evaluate}) failed")
    assert sum(provider.calls.values()) == 3  # prep's three rows; eval and report sent none


def test_after_a_completed_run_starts_at_once_and_an_unknown_name_is_refused(
    engine: Engine, dataset: Path
) -> None:
    prep = engine.submit(make_spec(dataset, name="prep"))
    engine.wait(prep, timeout=30)
    then = engine.submit(make_spec(dataset, name="eval", after=["prep"]))
    assert engine.wait(then, timeout=30).status == RunStatus.COMPLETED
    with pytest.raises(SpecError, match="after: no run named 'nightly' yet"):
        engine.submit(make_spec(dataset, name="eval", after=["nightly"]))


def test_a_cancelled_waiting_run_never_starts_and_a_cancelled_dependency_is_waited_for(
    engine: Engine, provider: ScriptedProvider, dataset: Path
) -> None:
    provider.hold_requests()
    prep = engine.submit(make_spec(dataset, name="prep"))
    dropped = engine.submit(make_spec(dataset, name="dropped", after=["prep"]))
    kept = engine.submit(make_spec(dataset, name="kept", after=["prep"]))
    engine.cancel(dropped)
    engine.cancel(prep)
    provider.release_requests()
    assert engine.wait(prep, timeout=30).status == RunStatus.CANCELLED
    assert engine.status(dropped).status == RunStatus.CANCELLED
    _until(lambda: "cancelled: resume it" in (engine.status(kept).reason or ""))
    assert engine.status(kept).status == RunStatus.WAITING

    engine.resume(prep)  # cancel is not failure: resumed, it completes and `kept` follows
    assert engine.wait(prep, timeout=30).status == RunStatus.COMPLETED
    _until_final(engine, kept)
    assert engine.status(kept).status == RunStatus.COMPLETED
    assert engine.status(dropped).total == 0


def test_a_new_owner_adopts_the_runs_left_waiting(
    store: Store, provider: ScriptedProvider, dataset: Path
) -> None:
    first = engine_on(store, provider)
    provider.hold_requests()
    prep = first.submit(make_spec(dataset, name="prep"))
    evaluate = first.submit(make_spec(dataset, name="eval", after=["prep"]))
    provider.release_requests()
    first.wait(prep, timeout=30)
    first.close()  # as if eval's dependency ended while no owner was up to see it
    RunStore(store).set_status(evaluate, RunStatus.WAITING, "after prep")
    with engine_on(store, provider) as second:
        assert second.adopt_waiting() == [evaluate]
        _until_final(second, evaluate)
        assert second.status(evaluate).status == RunStatus.COMPLETED


def _until_final(engine: Engine, run_id: str) -> None:
    def final() -> bool:
        progress = engine.status(run_id)
        if progress.active:
            engine.wait(run_id, timeout=30)
        return engine.status(run_id).status.is_final

    _until(final)


def _until(condition: object, timeout_s: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
