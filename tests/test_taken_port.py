"""A port another server holds is one line naming it, for `serve` and `fakellm` (they
crashed with a raw OSError traceback), and nothing claims to be serving first."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.cli import main


@pytest.fixture
def taken() -> Iterator[int]:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        yield int(holder.getsockname()[1])
    finally:
        holder.close()


@pytest.mark.parametrize("command", ["serve", "fakellm"])
def test_a_taken_port_is_one_line(command: str, taken: int, db_path: Path) -> None:
    result = CliRunner().invoke(main, [command, "--port", str(taken)])
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)
    said = result.stderr.strip().splitlines()
    expected = (
        f"error: cannot listen on 127.0.0.1:{taken}: Address already in use "
        "(another server has it? choose another with --port)"
    )
    assert said == [expected], result.stderr
