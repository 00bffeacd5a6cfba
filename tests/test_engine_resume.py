"""Crash and resume: a real child process killed with SIGKILL mid-run, then resumed."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import Engine
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.store import Store
from promptlab.store.runs import RunStore

ITEMS = 600
#: Kill once the server has answered this many: about half way.
KILL_AFTER = 250


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with serve_in_thread(FakeLLMConfig(port=0, latency_ms=40)) as running:
        yield running


def write_spec(tmp_path: Path, server: RunningServer) -> Path:
    dataset = tmp_path / "rows.csv"
    with dataset.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text"])
        writer.writerows([f"row number {i}"] for i in range(ITEMS))
    spec = {
        "name": "crash-test",
        "dataset": str(dataset),
        "variants": [
            {
                "name": "only",
                "messages": [{"role": "user", "content": "Summarize: {{ text }}"}],
                "model": "fake:gpt-4o-mini",
                "params": {"max_tokens": 32},
            }
        ],
        "endpoints": {
            "fake": {
                "kind": "openai",
                "base_url": server.openai_base_url,
                "concurrency": 8,
            }
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_and_kill(tmp_path: Path, server: RunningServer, db_path: Path) -> str:
    """Start `promptlab run` in a child process, SIGKILL it once the server has answered
    KILL_AFTER requests, and return the run's id."""
    spec = write_spec(tmp_path, server)
    child = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "--db", str(db_path), "run", str(spec), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline().split()
        assert first[0] == "run", child.stderr.read() if child.stderr else ""
        run_id = first[1]
        deadline = time.monotonic() + 120
        while server.stats()["successes"] < KILL_AFTER:
            assert child.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    return run_id


def test_kill_minus_nine_then_resume_loses_nothing_and_repeats_no_stored_result(
    tmp_path: Path, server: RunningServer, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = run_and_kill(tmp_path, server, db_path)

    with Store(db_path) as store:
        with store.read() as cur:
            before = dict(
                cur.execute(
                    "SELECT idempotency_key, status FROM items WHERE run_id = ?", [run_id]
                ).fetchall()
            )
            status = cur.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
        assert status == ("running",)
        # Stored as running, read as what it is: nobody drives it any more.
        killed = RunStore(store).get_run(run_id)
        assert killed.process_gone and killed.state == "interrupted (process gone)"
        stored_before = {k for k, s in before.items() if s == "succeeded"}
        assert 0 < len(stored_before) < ITEMS
        assert len(before) == ITEMS  # everything was planned before anything was sent

        with Engine(store) as engine:
            engine.resume(run_id)
            progress = engine.wait(run_id, timeout=120)
        assert progress.status == "completed", progress.reason
        assert progress.succeeded == ITEMS

        with store.read() as cur:
            finals = cur.execute(
                "SELECT idempotency_key, count(*) FROM results WHERE run_id = ? GROUP BY 1",
                [run_id],
            ).fetchall()
            events = [
                r[0]
                for r in cur.execute(
                    "SELECT status FROM run_events WHERE run_id = ? ORDER BY seq", [run_id]
                ).fetchall()
            ]
            repeated_attempt_numbers = cur.execute(
                "SELECT count(*) FROM (SELECT idempotency_key, attempt FROM attempts "
                "WHERE run_id = ? GROUP BY ALL HAVING count(*) > 1)",
                [run_id],
            ).fetchone()
    assert len(finals) == ITEMS and all(n == 1 for _, n in finals)  # none lost, none twice
    with Store(db_path) as store:
        resumed = RunStore(store).get_run(run_id)
    assert not resumed.process_gone and resumed.state == "completed"
    assert repeated_attempt_numbers == (0,)  # resumed attempts are numbered after earlier ones
    assert events[-3:] == ["scheduled", "running", "completed"]

    stats = server.stats()
    # Only requests in flight (or not yet committed) at the kill may be answered twice;
    # an item whose result was stored is never sent again.
    assert not set(stats["duplicate_ids"]) & stored_before
    assert stats["successes"] == ITEMS + stats["duplicate_completions"]
    assert stats["duplicate_completions"] <= ITEMS - len(stored_before)


def test_status_says_a_killed_run_is_interrupted_and_how_to_go_on(
    tmp_path: Path, server: RunningServer, db_path: Path
) -> None:
    run_id = run_and_kill(tmp_path, server, db_path)
    listed = CliRunner().invoke(main, ["--db", str(db_path), "status"])
    assert listed.exit_code == 0, listed.output
    assert f"{run_id}  interrupted (process gone)  " in listed.output
    one = CliRunner().invoke(main, ["--db", str(db_path), "status", run_id])
    assert one.exit_code == 0, one.output
    assert one.output.splitlines()[0].endswith(": interrupted (process gone)")
    assert f"go on with: promptlab resume {run_id}" in one.output
