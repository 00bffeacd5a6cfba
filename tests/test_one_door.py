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

#: Commands that go through typed routes (their own output compared both ways).
CONVERTED = [
    ["audit", "verify"],
    ["audit", "show", "{trace}"],
    ["audit", "show", "{trace}", "--json"],
    ["audit", "show", "abc"],  # an error: the same line, the same exit code
    ["token", "list"],
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
    db: Path, paths_called: list[str]
) -> None:
    trace = _trace(db)
    commands = [[arg.format(trace=trace) for arg in argv] for argv in CONVERTED]
    direct = [_invoke(db, argv) for argv in commands]
    server = Served(db)
    try:
        through = [_invoke(db, argv) for argv in commands]
    finally:
        server.stop()
    for argv, alone, served in zip(commands, direct, through, strict=True):
        shown = " ".join(argv)
        assert (served.exit_code, served.stdout, served.stderr) == (
            alone.exit_code, alone.stdout, alone.stderr,
        ), shown  # fmt: skip
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
