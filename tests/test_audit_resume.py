"""The audit chain survives kill -9: a run killed mid-way, resumed, verifies whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import Engine
from promptlab.fakellm import RunningServer
from promptlab.store import Store
from promptlab.store.audit import AuditLog
from tests.test_engine_resume import ITEMS, run_and_kill, server

__all__ = ["server"]  # the fixture, shared with the engine's own resume test


def test_kill_minus_nine_then_resume_then_verify_passes(
    tmp_path: Path, server: RunningServer, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = run_and_kill(tmp_path, server, db_path)

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
