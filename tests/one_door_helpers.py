"""The one-door check (issue 37): a command prints the same whether it opens the
database itself or goes through a server's typed routes, plus one line on stderr naming
the server (issue 61), and never sends a command line (`POST /v1/cli`). Used by
tests/test_one_door*.py, one file per command group."""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.server.client import ServerClient
from promptlab.server.discovery import discovery_path
from tests.test_server import Served

#: A time as the CLI prints one (`2026-12-03 10:02 UTC`, ISO with seconds and more).
_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(\+00:00| UTC)?")


def _untimed(text: str) -> str:
    return _TIME.sub("<time>", text)


def record_routes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every route the CLI calls on a server from now on, as `METHOD /path`."""
    called: list[str] = []
    original = ServerClient._open

    def recording(self: ServerClient, method: str, path: str, *args: Any) -> Any:
        called.append(f"{method} {path.split('?')[0]}")
        return original(self, method, path, *args)

    monkeypatch.setattr(ServerClient, "_open", recording)
    return called


def invoke(db: Path, argv: Sequence[str], stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, ["--db", str(db), *argv], input=stdin)


def through_line(server: Served) -> str:
    """The line a command through `server` says first on stderr: which server answered."""
    info = server.info
    return (
        f"through the promptlab server at {info.url} "
        f"(pid {info.pid}, {discovery_path(server.db)})\n"
    )


def unserved(result: Result, server: Served, asked: bool = True) -> str:
    """A served command's stderr without its first line, which must name `server` once
    when the command `asked` it anything. One that asked nothing may have found it and
    said so before refusing here (`dataset import x.txt`), or never looked for it
    (`validate --schema`)."""
    line = through_line(server)
    if asked or result.stderr.startswith(line):
        assert result.stderr.startswith(line), (result.stdout, result.stderr, line)
        rest = result.stderr[len(line) :]
    else:
        rest = result.stderr
    assert "through the promptlab server" not in rest, result.stderr
    return rest


def assert_same_both_ways(
    db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    reading: Sequence[Sequence[str]] = (),
    changing: Sequence[Sequence[str]] = (),
    values: Mapping[str, str] | None = None,
) -> list[str]:
    """Run `reading` (commands that change nothing) directly and then through a server
    on `db`, and `changing` in order on two copies of it (one direct, one served); each
    command's exit code, stdout and stderr must be equal, but for the one line first on a
    served command's stderr naming the server. `{name}` in an argument is filled from
    `values`. Returns the routes called; none is `/v1/cli`."""
    called = record_routes(monkeypatch)
    fill = dict(values or {})
    reads = [[arg.format(**fill) for arg in argv] for argv in reading]
    changes = [[arg.format(**fill) for arg in argv] for argv in changing]
    alone_db, served_db = tmp_path / "alone.duckdb", tmp_path / "served.duckdb"
    shutil.copyfile(db, alone_db)
    shutil.copyfile(db, served_db)
    direct = [invoke(db, argv) for argv in reads]
    direct += [invoke(alone_db, argv) for argv in changes]
    through: list[tuple[Result, str]] = []
    for target, argvs in ((db, reads), (served_db, changes)):
        if not argvs:
            continue
        server = Served(target)
        try:
            for argv in argvs:
                before = len(called)
                result = invoke(target, argv)
                through.append((result, unserved(result, server, len(called) > before)))
        finally:
            server.stop()
    pairs = zip(reads + changes, direct, through, strict=True)
    for i, (argv, alone, (served, said)) in enumerate(pairs):
        # The copies are changed a few seconds apart: times of changes may differ.
        same = _untimed if i >= len(reads) else str
        assert (served.exit_code, same(served.stdout), same(said)) == (
            alone.exit_code,
            same(alone.stdout),
            same(alone.stderr),
        ), " ".join(argv)
    assert called and not [p for p in called if p.endswith("/v1/cli")], called
    return called
