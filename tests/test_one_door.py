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
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.server.client import ServerClient
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


@pytest.fixture
def paths_called(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every route the CLI calls on a server, in order."""
    called: list[str] = []
    original = ServerClient._open

    def recording(self: ServerClient, method: str, path: str, *args: Any) -> Any:
        called.append(f"{method} {path.split('?')[0]}")
        return original(self, method, path, *args)

    monkeypatch.setattr(ServerClient, "_open", recording)
    return called


def _invoke(db: Path, argv: list[str]) -> Result:
    return CliRunner().invoke(main, ["--db", str(db), *argv])


def _trace(db: Path) -> str:
    from promptlab.store import Store

    with Store(db) as store, store.read() as cur:
        row = cur.execute("SELECT trace_id FROM audit_events WHERE kind = 'result' LIMIT 1")
        return str(row.fetchone()[0])


def test_converted_commands_print_the_same_through_a_server_and_never_send_a_command_line(
    db: Path, tmp_path: Path, paths_called: list[str]
) -> None:
    nightly = tmp_path / "nightly.yaml"
    nightly.write_text(
        f"name: nightly\nschedule: '0 2 * * *'\ndataset: {DEMO / 'tickets.csv'}\n"
        "variants:\n  - {name: p, prompt: ticket-triage@production}\n"
    )
    values = {"trace": _trace(db), "nightly": str(nightly)}
    reading = [[arg.format(**values) for arg in argv] for argv in READING]
    changing = [[arg.format(**values) for arg in argv] for argv in CHANGING]
    alone_db, served_db = tmp_path / "alone.duckdb", tmp_path / "served.duckdb"
    shutil.copyfile(db, alone_db)
    shutil.copyfile(db, served_db)
    direct = [_invoke(db, argv) for argv in reading]
    direct += [_invoke(alone_db, argv) for argv in changing]
    server = Served(db)
    try:
        through = [_invoke(db, argv) for argv in reading]
    finally:
        server.stop()
    server = Served(served_db)
    try:
        through += [_invoke(served_db, argv) for argv in changing]
    finally:
        server.stop()
    for argv, alone, served in zip(reading + changing, direct, through, strict=True):
        assert (served.exit_code, served.stdout, served.stderr) == (
            alone.exit_code, alone.stdout, alone.stderr,
        ), " ".join(argv)  # fmt: skip
    assert paths_called and not [p for p in paths_called if p.endswith("/v1/cli")], paths_called


def test_an_audit_export_is_streamed_and_written_here(
    db: Path, runs: tuple[Path, str, str], tmp_path: Path, paths_called: list[str]
) -> None:
    run_id = runs[1]
    alone = _invoke(db, ["audit", "export", "--run", run_id, "-o", str(tmp_path / "a.jsonl")])
    assert alone.exit_code == 0, alone.stderr
    server = Served(db)
    try:
        out = tmp_path / "b.jsonl"
        served = _invoke(db, ["audit", "export", "--run", run_id, "-o", str(out)])
        assert served.exit_code == 0, served.stderr
        again = _invoke(db, ["audit", "export", "--run", run_id, "-o", str(out)])
        assert again.exit_code == 1 and "already exists" in again.stderr
        missing = _invoke(db, ["audit", "export", "--run", "run_nope", "-o", str(tmp_path / "c")])
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
