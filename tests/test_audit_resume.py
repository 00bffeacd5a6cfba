"""The audit chain survives kill -9: a run killed mid-way, resumed, verifies whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import Engine
from promptlab.fakellm import RunningServer
from promptlab.store import Store
from promptlab.store.audit import AuditLog
from tests.test_engine_resume import ITEMS, KILL_AFTER, server, write_spec

__all__ = ["server"]  # the fixture, shared with the engine's own resume test


def test_kill_minus_nine_then_resume_then_verify_passes(
    tmp_path: Path, server: RunningServer, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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

    with Store(db_path) as store:
        killed = AuditLog(store).verify()
        assert killed.ok, killed.problems  # what was stored is whole, even mid-run
        with Engine(store) as engine:
            engine.resume(run_id)
            assert engine.wait(run_id, timeout=120).status == "completed"
        with store.read() as cur:
            (attempt_rows,) = cur.execute(
                "SELECT count(*) FROM attempts WHERE run_id = ?", [run_id]
            ).fetchall()[0]
            counts = dict(
                cur.execute(
                    "SELECT kind, count(*) FROM audit_events WHERE chain = ? GROUP BY kind",
                    [f"run:{run_id}"],
                ).fetchall()
            )
            (folded,) = cur.execute(
                "SELECT count(*) FROM audit_events WHERE chain = ? AND kind = 'result' "
                "AND json_extract(payload, '$.attempt') IS NOT NULL",
                [f"run:{run_id}"],
            ).fetchall()[0]
            changes = [
                r[0]
                for r in cur.execute(
                    "SELECT kind FROM audit_events WHERE chain = 'changes' AND run_id = ? "
                    "ORDER BY seq",
                    [run_id],
                ).fetchall()
            ]
    # Events exist exactly for the rows stored: the rows lost to the kill took theirs.
    assert counts.get("attempt", 0) + folded == attempt_rows
    assert counts["result"] == ITEMS
    assert changes == ["run.submitted", "run.resumed", "run.ended"]
    verified = CliRunner().invoke(main, ["--db", str(db_path), "audit", "verify"])
    assert verified.exit_code == 0, verified.output
