"""The audit chain survives kill -9: a run killed mid-way, resumed, verifies whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine import Engine
from promptlab.fakellm.server import RunningServer
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
            (failed_attempts,) = cur.execute(
                "SELECT count(*) FROM attempts WHERE run_id = ? AND outcome <> 'ok'", [run_id]
            ).fetchall()[0]
            (unmatched,) = cur.execute(
                "SELECT count(*) FROM (SELECT idempotency_key FROM results WHERE run_id = ?) r "
                "FULL JOIN (SELECT trace_id FROM audit_events WHERE chain = ? "
                "AND kind = 'result') e ON e.trace_id = r.idempotency_key "
                "WHERE e.trace_id IS NULL OR r.idempotency_key IS NULL",
                [run_id, f"run:{run_id}"],
            ).fetchall()[0]
            counts = dict(
                cur.execute(
                    "SELECT kind, count(*) FROM audit_events WHERE chain = ? GROUP BY kind",
                    [f"run:{run_id}"],
                ).fetchall()
            )
            changes = [
                r[0]
                for r in cur.execute(
                    "SELECT kind FROM audit_events WHERE chain = 'changes' AND run_id = ? "
                    "ORDER BY seq",
                    [run_id],
                ).fetchall()
            ]
    # Events exist exactly for the rows stored: the rows lost to the kill took theirs.
    # A failed attempt has its own event; each results row has its result event.
    assert counts.get("attempt", 0) == failed_attempts
    assert counts["result"] == ITEMS and unmatched == 0
    assert changes == ["run.submitted", "run.resumed", "run.ended"]
    verified = CliRunner().invoke(main, ["--db", str(db_path), "audit", "verify"])
    assert verified.exit_code == 0, verified.output
