"""Keys stay where they are configured (issue 37): nothing sent to a served process can
make it send a key of its environment, or read a file, where its owner did not say.

A real `promptlab serve` child with a private variable in its environment, a capture
server on loopback recording every request's Authorization header."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.cli import main
from tests.test_server import Served

PRIVATE = "private-value-never-to-leave-0123456789"


class _Capture(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        _Capture.seen.append(self.headers.get("Authorization", ""))
        self.send_response(500)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        return None


@pytest.fixture
def capture() -> Iterator[str]:
    _Capture.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


@pytest.fixture
def served(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("MY_PRIVATE_VAR", PRIVATE)
    monkeypatch.setenv("OPENAI_API_KEY", PRIVATE)
    server = Served(db_path)
    try:
        yield server
    finally:
        server.stop()


def _requests(tmp_path: Path) -> Path:
    path = tmp_path / "r.jsonl"
    lines = [
        {"custom_id": f"r{i}", "messages": [{"role": "user", "content": "hi"}]} for i in range(2)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_batch_through_the_server_cannot_pair_a_url_with_a_key_variable(
    served: Served, capture: str, tmp_path: Path
) -> None:
    requests = str(_requests(tmp_path))
    for settings, endpoint in (
        ({"base_url": capture, "api_key_env": "MY_PRIVATE_VAR"}, None),
        ({"base_url": capture}, "openai"),  # the configured key, to another URL
        ({"api_key_env": "MY_PRIVATE_VAR"}, "openai"),  # another variable, to its URL
    ):
        body = {"requests": requests, "model": "m", "settings": settings, "endpoint": endpoint}
        status, answer = served.call("POST", "/v1/batches", body)
        assert status == 422, (settings, answer)
        assert "providers file" in answer["error"]
    # The CLI through the server is held to the same rule (it calls /v1/batches).
    argv = [
        "batch",
        requests,
        "--base-url",
        capture,
        "--api-key-env",
        "MY_PRIVATE_VAR",
        "--model",
        "m",
        "--quiet",
    ]
    refused = CliRunner().invoke(main, ["--db", str(served.db), *argv])
    assert refused.exit_code != 0 and "providers file" in refused.stderr, refused.output
    assert _Capture.seen == []


def test_a_keyless_loopback_endpoint_still_runs_through_the_server(
    served: Served, capture: str, tmp_path: Path
) -> None:
    body = {"requests": str(_requests(tmp_path)), "model": "m", "settings": {"base_url": capture}}
    status, answer = served.call("POST", "/v1/batches", body)
    assert status == 201, answer
    # It reached the capture server (which answers 500), and with no key of ours.
    run = served.call("GET", f"/v1/runs/{answer['run_id']}")[1]
    assert run["run_id"] == answer["run_id"]
    assert all(PRIVATE not in seen for seen in _Capture.seen)


def test_only_an_admin_s_request_may_name_files_outside_the_data_folder(
    served: Served, tmp_path: Path
) -> None:
    status, made = served.call("POST", "/v1/tokens", {"name": "alice", "role": "editor"})
    assert status == 201
    (tmp_path / "elsewhere").mkdir()
    outside = _requests(tmp_path / "elsewhere")
    body = {"requests": str(outside), "model": "m", "endpoint": "sim"}
    status, answer = served.call("POST", "/v1/batches", body, token=made["token"])
    assert status == 403 and "outside the data folder" in answer["error"], answer
    variant = {"name": "v", "requests": "as_written", "model": "sim:sim-small"}
    spec = {"name": "peek", "dataset": str(outside), "variants": [variant]}
    status, answer = served.call("POST", "/v1/runs", {"spec": spec}, token=made["token"])
    assert status in (403, 422) and "data folder" in answer["error"], answer
