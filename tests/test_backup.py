"""Backups that restore (issue 59): `promptlab backup` takes a consistent copy of a live
database through the server that owns it while a run writes; each copy verifies and
holds every result recorded before it began; `restore` puts one in place, refusing a
database in use and keeping the one it replaces."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
from click.testing import CliRunner

from promptlab.cli import main
from tests.test_server import Served
from tests.test_server import served as served  # fixture

PATIENCE_S = 120.0


def results_of(db: Path) -> set[str]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return {str(k) for (k,) in conn.execute("SELECT idempotency_key FROM results").fetchall()}


def test_backups_taken_while_a_run_writes_restore_and_verify(
    served: Served, db_path: Path, tmp_path: Path
) -> None:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(400)))
    spec = {
        "name": "backed-up",
        "dataset": str(dataset),
        "limits": {"sim": {"concurrency": 4}},
        "variants": [
            {
                "name": "v",
                "model": "sim:careful",
                "params": {"max_tokens": 16},
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
            }
        ],
    }
    status, started = served.call("POST", "/v1/runs", {"spec": spec})
    assert status == 201, started
    run_id = started["run_id"]
    copies: list[tuple[Path, int]] = []
    deadline = time.monotonic() + PATIENCE_S
    for i in range(3):  # while it writes: each backup after more results are in
        while served.call("GET", f"/v1/runs/{run_id}")[1]["succeeded"] < 20 * (i + 1):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        before = served.call("GET", f"/v1/runs/{run_id}")[1]["succeeded"]
        dest = tmp_path / f"copy-{i}.duckdb"
        taken = CliRunner().invoke(main, ["backup", str(dest)])
        assert taken.exit_code == 0, taken.output + taken.stderr
        copies.append((dest, before))
    view = served.call("GET", f"/v1/runs/{run_id}")[1]
    assert view["status"] == "running", "the run ended before every backup was taken"
    # The copies: complete databases, each verified, each with what was in before it.
    for dest, before in copies:
        assert len(results_of(dest)) >= before
        verified = CliRunner().invoke(main, ["--db", str(dest), "audit", "verify"])
        assert verified.exit_code == 0, verified.output + verified.stderr
    # A database in use is not overwritten; another place takes a copy, and verifies.
    refused = CliRunner().invoke(main, ["--db", str(db_path), "restore", str(copies[0][0])])
    assert refused.exit_code != 0 and "in use" in refused.stderr
    restored = tmp_path / "restored.duckdb"
    restored.write_bytes(b"")  # a file there already: kept aside, not lost
    done = CliRunner().invoke(main, ["--db", str(restored), "restore", str(copies[-1][0])])
    assert done.exit_code == 0, done.output + done.stderr
    assert "the database it replaced is" in done.output
    assert results_of(restored) == results_of(copies[-1][0])
    verified = CliRunner().invoke(main, ["--db", str(restored), "audit", "verify"])
    assert verified.exit_code == 0, verified.output + verified.stderr
