"""One door (issue 37): with a server owning the database, a converted command calls
its typed route, never `POST /v1/cli`, and prints exactly what it prints on its own.

Each command runs twice on the same database: directly, then through a real `promptlab
serve` child; the outputs must be equal byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.one_door_helpers import assert_same_both_ways, invoke, record_routes
from tests.test_server import Served

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"

#: Commands that go through typed routes and change nothing: each pass reads the same.
READING = [
    ["audit", "verify"],
    ["audit", "show", "{trace}"],
    ["audit", "show", "{trace}", "--json"],
    ["audit", "show", "abc"],  # an error: the same line, the same exit code
    ["token", "list"],
    ["schedule", "list"],
    ["status"],
    ["status", "--limit", "1"],
    ["status", "{run}"],
    ["status", "run_nope"],
]
#: Commands that change the database: each pass runs on its own copy, in this order.
CHANGING = [
    ["schedule", "add", "{nightly}"],
    ["schedule", "list"],
    ["schedule", "pause", "nightly"],
    ["schedule", "list"],
    ["schedule", "resume", "nightly"],
    ["schedule", "pause", "no-such-schedule"],
    ["schedule", "remove", "nightly"],
    ["schedule", "list"],
]


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> Path:
    copy = tmp_path / "runs.duckdb"
    shutil.copyfile(runs[0], copy)
    return copy


def _trace(db: Path) -> str:
    from promptlab.store import Store

    with Store(db) as store, store.read() as cur:
        row = cur.execute("SELECT trace_id FROM audit_events WHERE kind = 'result' LIMIT 1")
        return str(row.fetchone()[0])


def test_converted_commands_print_the_same_through_a_server_and_never_send_a_command_line(
    db: Path, runs: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nightly = tmp_path / "nightly.yaml"
    nightly.write_text(
        f"name: nightly\nschedule: '0 2 * * *'\ndataset: {DEMO / 'tickets.csv'}\n"
        "variants:\n  - {name: p, prompt: ticket-triage@production}\n"
    )
    values = {"trace": _trace(db), "nightly": str(nightly), "run": runs[1]}
    assert_same_both_ways(
        db, tmp_path, monkeypatch, reading=READING, changing=CHANGING, values=values
    )


def test_an_audit_export_is_streamed_and_written_here(
    db: Path, runs: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths_called = record_routes(monkeypatch)
    run_id = runs[1]
    alone = invoke(db, ["audit", "export", "--run", run_id, "-o", str(tmp_path / "a.jsonl")])
    assert alone.exit_code == 0, alone.stderr
    server = Served(db)
    try:
        out = tmp_path / "b.jsonl"
        served = invoke(db, ["audit", "export", "--run", run_id, "-o", str(out)])
        assert served.exit_code == 0, served.stderr
        again = invoke(db, ["audit", "export", "--run", run_id, "-o", str(out)])
        assert again.exit_code == 1 and "already exists" in again.stderr
        missing = invoke(db, ["audit", "export", "--run", "run_nope", "-o", str(tmp_path / "c")])
        assert missing.exit_code == 1 and "run_nope" in missing.stderr
        assert not (tmp_path / "c").exists()
    finally:
        server.stop()
    # One more event than alone: alone's export is itself a change event of the run.
    written = len(out.read_text().splitlines())
    assert served.stdout == f"wrote {written} events to {out}\n"

    def events(path: Path) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        return [e for e in lines if e["kind"] != "table.exported"]

    assert events(out) == events(tmp_path / "a.jsonl")
    assert "GET /v1/audit/export" in paths_called
    assert not [p for p in paths_called if p.endswith("/v1/cli")]
