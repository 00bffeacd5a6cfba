"""An answer longer than a result row holds (issue 60: a 50 MB answer failed its write
with `store_error` and was dropped) is kept in a file, and its item fails `too_large`
naming the size and the file; the rows beside it are stored as usual."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine.record.spill import MAX_OUTPUT_CHARS

HUGE = MAX_OUTPUT_CHARS + 1000


class _Answer(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        prompt = asked["messages"][-1]["content"]
        text = "x" * HUGE if "huge" in prompt else f"echo {prompt}"
        body = json.dumps(
            {
                "id": "c",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_too_large_answer_is_kept_on_disk_and_fails_its_item_naming_both(
    answering: str, tmp_path: Path, db_path: Path
) -> None:
    (tmp_path / "rows.csv").write_text("text\nsmall one\nhuge one\nsmall two\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"dataset: rows.csv\nendpoints: {{big: {{kind: openai, base_url: '{answering}'}}}}\n"
        "variants: [{messages: [{role: user, content: '{{ text }}'}], model: 'big:m'}]\n"
    )
    run = CliRunner().invoke(main, ["run", str(spec)])
    assert run.exit_code == 0, run.output
    with duckdb.connect(str(db_path), read_only=True) as conn:
        rows = conn.execute(
            "SELECT row_index, status, error_kind, error_message, length(output_text) "
            "FROM results ORDER BY row_index"
        ).fetchall()
    assert [(r[1], r[2]) for r in rows] == [
        ("succeeded", None),
        ("failed", "too_large"),
        ("succeeded", None),
    ]
    message = str(rows[1][3])
    assert f"{HUGE:,} characters" in message and "kept in " in message
    kept = Path(message.rpartition("kept in ")[2])
    assert kept.is_file() and kept.stat().st_mode & 0o777 == 0o600
    assert kept.read_text() == "x" * HUGE
