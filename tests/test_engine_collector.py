"""The collector's tuning while runs go: set by the first run, put back after the last."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import promptlab.engine.collector as collector
import promptlab.engine.executor as executor
from promptlab.config import Settings
from promptlab.engine import Engine
from promptlab.engine.collector import RUN_YOUNG_THRESHOLD, CollectorHold
from promptlab.engine.testing import ScriptedProvider
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store
from tests.test_engine_run import make_spec, write_dataset

HOST = (900, 11, 12)
TUNED = (RUN_YOUNG_THRESHOLD, 11, 12)


@pytest.fixture(autouse=True)
def host_collector() -> Iterator[None]:
    """Known thresholds before each test, the process's own after it (and no hold left
    by a failed test to spoil the next ones)."""
    saved = gc.get_threshold()
    gc.set_threshold(*HOST)
    try:
        yield
    finally:
        collector._holds, collector._tuned = 0, None
        gc.enable()
        gc.set_threshold(*saved)


def test_a_run_raises_the_young_threshold_and_puts_it_back_after() -> None:
    with CollectorHold():
        assert gc.get_threshold() == TUNED  # the middle and old thresholds are the host's
    assert gc.get_threshold() == HOST


def test_overlapping_runs_keep_the_tuning_until_the_last_one_ends() -> None:
    first, second = CollectorHold(), CollectorHold()
    first.release()  # the first run ends while the second goes on
    first.release()  # released twice: still one hold fewer, not two
    assert gc.get_threshold() == TUNED
    second.release()
    assert gc.get_threshold() == HOST


def test_a_run_that_fails_puts_the_collector_back() -> None:
    with pytest.raises(RuntimeError), CollectorHold():
        raise RuntimeError("the run failed")
    assert gc.get_threshold() == HOST


def test_thresholds_the_host_sets_during_a_run_are_kept() -> None:
    with CollectorHold():
        gc.set_threshold(5_000, 3, 4)
    assert gc.get_threshold() == (5_000, 3, 4)


@pytest.mark.parametrize(
    "host",
    [
        pytest.param(lambda: gc.set_threshold(50_000, 11, 12), id="a higher threshold"),
        pytest.param(lambda: gc.set_threshold(0, 11, 12), id="threshold 0"),
        pytest.param(gc.disable, id="disabled"),
    ],
)
def test_a_host_collecting_less_or_not_at_all_is_left_alone(host: Any) -> None:
    host()
    before = gc.get_threshold()
    with CollectorHold():
        assert gc.get_threshold() == before
    assert gc.get_threshold() == before


def test_the_setting_off_changes_nothing() -> None:
    with CollectorHold(enabled=False):
        assert gc.get_threshold() == HOST


def _in_child(check: Any) -> int:
    """Run `check` in a forked child; its exit code (0: it held)."""
    pid = os.fork()
    if pid == 0:
        code = 2  # the check raised
        try:
            code = 0 if check() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_process_forked_during_a_run_is_not_left_tuned() -> None:
    with CollectorHold() as parents:
        # The child: the run did not come along.
        assert _in_child(lambda: gc.get_threshold() == HOST) == 0

        def inherited_hold_is_not_counted() -> bool:
            with CollectorHold():  # the child's own run
                parents.release()  # e.g. the child closes the engine it inherited
                return gc.get_threshold() == TUNED

        assert _in_child(inherited_hold_is_not_counted) == 0
        assert gc.get_threshold() == TUNED  # the parent's run goes on
    assert gc.get_threshold() == HOST


def _engine(store: Store, provider: ScriptedProvider, tune_gc: bool = True) -> Engine:
    endpoints = {"fake": EndpointConfig("fake", "openai", rpm=60_000, concurrency=4)}
    settings = Settings(db_path=store.path, tune_gc=tune_gc)
    factory = lambda _cfg: provider  # noqa: E731
    return Engine(store, endpoints=endpoints, provider_factory=factory, settings=settings)


@pytest.mark.parametrize("tune_gc", [True, False])
def test_the_engine_tunes_the_collector_while_its_run_goes(
    store: Store, tmp_path: Path, tune_gc: bool
) -> None:
    seen: list[tuple[int, int, int]] = []

    def note_threshold(_request: CompletionRequest, _attempt: int) -> Any:
        seen.append(gc.get_threshold())
        return None  # answer normally

    with _engine(store, ScriptedProvider(fault=note_threshold), tune_gc) as engine:
        run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 5)))
        assert engine.wait(run_id, timeout=30).succeeded == 5
        assert seen == [TUNED if tune_gc else HOST] * 5
        assert gc.get_threshold() == HOST


@pytest.mark.parametrize("shutdown_fails", [False, True])
def test_an_engine_closed_while_its_run_still_goes_puts_the_collector_back(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shutdown_fails: bool
) -> None:
    provider = ScriptedProvider()
    provider.hold_requests()  # the run's requests never come back
    engine = _engine(store, provider)
    try:
        run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 3)))
        deadline = time.monotonic() + 10
        while provider.in_flight < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gc.get_threshold() == TUNED
        # close() gives up waiting for the run (after 0.5 s, not 30), or fails outright.
        monkeypatch.setattr(executor, "CALL_TIMEOUT_S", 0.5)
        if shutdown_fails:
            monkeypatch.setattr(engine, "_call", _failing_call)
            with pytest.raises(OSError):
                engine.close()
        else:
            engine.close()
        assert gc.get_threshold() == HOST
    finally:
        provider.release_requests()
        if shutdown_fails:  # finish what the failed close left: the run, writer, loop
            assert not engine.wait(run_id, 10).active
            Engine._call(engine, engine._shutdown())
            engine._loop.call_soon_threadsafe(engine._loop.stop)
            engine._thread.join(5)
            engine._store_calls.shutdown(wait=True)


def _failing_call(coro: Any, *_args: Any) -> Any:
    coro.close()
    raise OSError("the final commit failed")


def test_the_setting_comes_from_the_environment() -> None:
    assert Settings.from_env({}).tune_gc is True
    assert Settings.from_env({"PROMPTLAB_TUNE_GC": "0"}).tune_gc is False
