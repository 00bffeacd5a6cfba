"""The collector's tuning while runs go: set for the first run, put back after the last."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promptlab.config import Settings
from promptlab.engine import Engine
from promptlab.engine.collector import RUN_THRESHOLDS, tuned_collector
from promptlab.engine.testing import ScriptedProvider
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store
from tests.test_engine_run import make_spec, write_dataset

HOST_THRESHOLDS = (900, 11, 12)


@pytest.fixture(autouse=True)
def host_collector() -> Iterator[None]:
    """Known thresholds and no freeze before each test, the process's own after it."""
    saved = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(*HOST_THRESHOLDS)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()
        gc.set_threshold(*saved)


def state() -> tuple[tuple[int, int, int], bool]:
    return gc.get_threshold(), gc.get_freeze_count() > 0


def test_a_run_collects_less_often_and_puts_the_collector_back_after() -> None:
    kept = [object() for _ in range(10)]  # objects that exist when the run starts
    with tuned_collector():
        assert state() == (RUN_THRESHOLDS, True)
    assert state() == (HOST_THRESHOLDS, False)
    assert kept


def test_overlapping_runs_keep_the_tuning_until_the_last_one_ends() -> None:
    first, second = tuned_collector(), tuned_collector()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first run ends while the second goes on
    assert state() == (RUN_THRESHOLDS, True)
    second.__exit__(None, None, None)
    assert state() == (HOST_THRESHOLDS, False)


def test_a_run_that_fails_puts_the_collector_back() -> None:
    with pytest.raises(RuntimeError), tuned_collector():
        raise RuntimeError("the run failed")
    assert state() == (HOST_THRESHOLDS, False)


def test_a_freeze_of_the_host_process_is_left_alone() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with tuned_collector():
        assert gc.get_threshold() == RUN_THRESHOLDS
    assert gc.get_freeze_count() == frozen  # not unfrozen by the run's end
    assert gc.get_threshold() == HOST_THRESHOLDS


def test_a_disabled_collector_or_the_setting_off_changes_nothing() -> None:
    gc.disable()
    with tuned_collector():
        assert state() == (HOST_THRESHOLDS, False)
    gc.enable()
    with tuned_collector(enabled=False):
        assert state() == (HOST_THRESHOLDS, False)


@pytest.mark.parametrize("tune_gc", [True, False])
def test_the_engine_tunes_the_collector_while_its_run_goes(
    store: Store, tmp_path: Path, tune_gc: bool
) -> None:
    seen: list[tuple[tuple[int, int, int], bool]] = []

    def note_state(_request: CompletionRequest, _attempt: int) -> Any:
        seen.append(state())
        return None  # answer normally

    provider = ScriptedProvider(fault=note_state)
    endpoints = {"fake": EndpointConfig("fake", "openai", rpm=60_000, concurrency=4)}
    settings = Settings(db_path=store.path, tune_gc=tune_gc)
    with Engine(
        store, endpoints=endpoints, provider_factory=lambda _cfg: provider, settings=settings
    ) as engine:
        run_id = engine.submit(make_spec(write_dataset(tmp_path / "d.csv", 5)))
        assert engine.wait(run_id, timeout=30).succeeded == 5
        expected = (RUN_THRESHOLDS, True) if tune_gc else (HOST_THRESHOLDS, False)
        assert seen == [expected] * 5
        assert state() == (HOST_THRESHOLDS, False)


def test_the_setting_comes_from_the_environment() -> None:
    assert Settings.from_env({}).tune_gc is True
    assert Settings.from_env({"PROMPTLAB_TUNE_GC": "0"}).tune_gc is False
