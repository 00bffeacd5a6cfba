"""`promptlab batch`: request files run as written, results in the OpenAI Batch format."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.store import RunStore, Store

LINES = 2_000


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningServer]:
    config = FakeLLMConfig(port=0, latency_ms=1, record_requests=LINES)
    with serve_in_thread(config) as running:
        providers = tmp_path / "providers.yaml"
        providers.write_text(
            yaml.safe_dump(
                {
                    "endpoints": {
                        "fake": {
                            "kind": "openai",
                            "base_url": running.openai_base_url,
                            "models": {"*": {"context_window": 8192}},
                        }
                    }
                }
            )
        )
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
        yield running


def batch_file(path: Path, lines: int = LINES) -> Path:
    with path.open("w") as handle:
        for i in range(lines):
            body = {
                "model": "gpt-4o-mini",
                "messages": (
                    [{"role": "system", "content": f"You are assistant {i}."}] if i % 2 else []
                )
                + [{"role": "user", "content": f"Question number {i}?"}],
                "max_tokens": 10 + i,
            }
            if i % 3 == 0:
                body["temperature"] = 0.5
            line = {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": body,
            }
            handle.write(json.dumps(line) + "\n")
    return path


def fingerprint(messages: list[dict[str, str]], max_tokens: int) -> str:
    return hashlib.sha256(json.dumps([messages, max_tokens], sort_keys=True).encode()).hexdigest()


def test_a_batch_file_round_trips_exactly_as_written(
    tmp_path: Path, server: RunningServer, db_path: Path
) -> None:
    requests = batch_file(tmp_path / "requests.jsonl")
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        main, ["batch", str(requests), "--endpoint", "fake", "-o", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    sent = [json.loads(line)["body"] for line in requests.read_text().splitlines()]
    received = [r["body"] for r in server.requests()]
    assert sorted(fingerprint(b["messages"], b["max_tokens"]) for b in received) == sorted(
        fingerprint(b["messages"], b["max_tokens"]) for b in sent
    )
    temperatures = {
        r["headers"]["x-client-request-id"]: r["body"].get("temperature") for r in server.requests()
    }
    assert temperatures["req-0"] == 0.5 and temperatures["req-1"] is None
    outputs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [o["custom_id"] for o in outputs] == [f"req-{i}" for i in range(LINES)]
    for line in outputs:
        assert line["error"] is None and line["response"]["status_code"] == 200
        openai.types.chat.ChatCompletion.model_validate(line["response"]["body"])
    run_id = result.stdout.split()[1]
    status = CliRunner().invoke(main, ["status", run_id])
    assert f"succeeded={LINES}" in status.stdout


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"custom_id": "a", "body": {"messages": []}}', "line 2: 'messages' must be a non-empty"),
        (
            '{"custom_id": "a", "body": {"messages": [{"role": "user", "content": "x"}], '
            '"max_tokens": -5}}',
            "line 2: params.max_tokens: expected a positive integer",
        ),
        (
            '{"custom_id": "req-0", "body": {"messages": [{"role": "user", "content": "x"}]}}',
            "line 2: custom_id 'req-0' repeats",
        ),
        (
            '{"custom_id": "a", "body": {"messages": [{"role": "user", "content": "x"}], '
            '"tools": []}}',
            "line 2: body fields not supported: tools",
        ),
        ("not json", "line 2: not valid JSON"),
        (
            '{"custom_id": "big", "body": {"messages": [{"role": "user", "content": "'
            + "x" * 200_001
            + '"}]}}',
            "line 2: messages[0]: 200001 characters, more than",
        ),
    ],
)
def test_a_malformed_line_is_refused_before_a_run_exists(
    tmp_path: Path, server: RunningServer, db_path: Path, line: str, message: str
) -> None:
    requests = batch_file(tmp_path / "requests.jsonl", lines=1)
    requests.write_text(requests.read_text() + line + "\n")
    result = CliRunner().invoke(main, ["batch", str(requests), "--endpoint", "fake"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert server.stats()["attempts"] == 0
    with Store(db_path) as store:
        assert RunStore(store).list_runs(10) == []


def test_kill_minus_nine_during_a_batch_then_resume_loses_and_repeats_nothing(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items, kill_after = 600, 250
    with serve_in_thread(FakeLLMConfig(port=0, latency_ms=40)) as slow:
        providers = tmp_path / "providers.yaml"
        providers.write_text(
            yaml.safe_dump(
                {
                    "endpoints": {
                        "fake": {
                            "kind": "openai",
                            "concurrency": 8,
                            "base_url": slow.openai_base_url,
                        }
                    }
                }
            )
        )
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
        requests = batch_file(tmp_path / "requests.jsonl", lines=items)
        command = [
            sys.executable,
            "-m",
            "promptlab",
            "--db",
            str(db_path),
            "batch",
            str(requests),
            "--endpoint",
            "fake",
            "--quiet",
        ]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        try:
            assert child.stdout is not None
            run_id = child.stdout.readline().split()[1]
            deadline = time.monotonic() + 120
            while slow.stats()["successes"] < kill_after:
                assert child.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
        with Store(db_path) as store, store.read() as cur:
            stored = {
                json.loads(row)["custom_id"]
                for (row,) in cur.execute(
                    "SELECT rr.row_values FROM results r JOIN run_rows rr ON "
                    "rr.run_id = r.run_id AND rr.row_index = r.row_index "
                    "WHERE r.run_id = ? AND r.status = 'succeeded'",
                    [run_id],
                ).fetchall()
            }
        assert 0 < len(stored) < items

        out = tmp_path / "results.jsonl"
        resumed = CliRunner().invoke(main, ["resume", run_id, "-o", str(out), "--quiet"])
        stats = slow.stats()
    assert resumed.exit_code == 0, resumed.output
    outputs = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(o["custom_id"] for o in outputs) == sorted(f"req-{i}" for i in range(items))
    assert all(o["response"]["status_code"] == 200 for o in outputs)
    # Requests whose answers were stored before the kill were never sent again.
    assert not set(stats["duplicate_ids"]) & stored
