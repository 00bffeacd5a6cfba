"""Pause: dispatch stops at once, what is in flight finishes and is recorded, pending
items stay pending (no cancelled rows), and resume sends each of them once; through a
server from another terminal (`promptlab pause`), as a user of a shared owner does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import Engine
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import EngineError
from promptlab.records import RunStatus
from promptlab.store import Store
from tests.fakellm_fixtures import ServerFactory
from tests.test_engine_run import final_rows, make_spec, write_dataset
from tests.test_run_dependencies import engine_on
from tests.test_server import ROWS, Served, _spec, succeeded


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider(latency_s=0.02)


@pytest.fixture
def engine(store: Store, provider: ScriptedProvider) -> Iterator[Engine]:
    with engine_on(store, provider) as eng:
        yield eng


def test_a_paused_run_keeps_its_pending_items_and_resume_sends_each_once(
    engine: Engine, store: Store, provider: ScriptedProvider, tmp_path: Path
) -> None:
    spec = make_spec(write_dataset(tmp_path / "rows.csv", 60), limits={"fake": {"concurrency": 2}})
    run_id = engine.submit(spec)
    while engine.status(run_id).succeeded < 10:
        time.sleep(0.01)
    engine.pause(run_id)
    paused = engine.wait(run_id, timeout=30)
    assert paused.status == RunStatus.PAUSED and not paused.active
    assert paused.pending > 0 and paused.cancelled == 0 and paused.in_flight == 0
    assert paused.succeeded == len(final_rows(store, run_id)) == sum(provider.calls.values())
    with pytest.raises(EngineError, match="is paused, not running here"):
        engine.pause(run_id)

    engine.resume(run_id)
    done = engine.wait(run_id, timeout=30)
    assert done.status == RunStatus.COMPLETED and done.succeeded == 60
    assert set(provider.calls.values()) == {1}  # no item sent twice


def test_promptlab_pause_reaches_the_server_and_resume_finishes(
    tmp_path: Path, db_path: Path, fakellm_factory: ServerFactory
) -> None:
    server = fakellm_factory(latency_ms=100)
    served = Served(db_path)
    try:
        spec = yaml.safe_load(_spec(tmp_path, server).read_text())
        status, started = served.call(
            "POST", "/v1/runs", {"spec": spec, "base_dir": str(tmp_path), "default_name": "p"}
        )
        assert status == 201
        run_id = started["run_id"]
        while server.stats()["successes"] < 5:
            time.sleep(0.02)
        paused = CliRunner().invoke(main, ["pause", run_id])
        assert paused.exit_code == 0, paused.output
        assert f"run {run_id}: running -> paused" in paused.output
        sent = server.stats()["successes"]
        _, progress = served.call("GET", f"/v1/runs/{run_id}")
        assert (progress["succeeded"], progress["pending"], progress["cancelled"]) == (
            sent,
            ROWS - sent,
            0,
        ) and sent < ROWS  # every answer recorded, the rest waiting
        time.sleep(0.3)
        assert server.stats()["successes"] == sent  # nothing more goes out while paused
        assert "paused" in CliRunner().invoke(main, ["status"]).output

        resumed = CliRunner().invoke(main, ["resume", run_id, "--quiet"])
        assert resumed.exit_code == 0, resumed.output
    finally:
        served.stop()
    assert succeeded(db_path, run_id) == (ROWS, ROWS)
    assert server.stats()["successes"] == ROWS
