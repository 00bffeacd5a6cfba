"""`promptlab run / resume / status / cancel` against a real fakellm over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.fakellm import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.store import Store
from promptlab.store.runs import RunStore

KEY_ENV = "PROMPTLAB_TEST_FAKE_KEY"


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with serve_in_thread(FakeLLMConfig(port=0, latency_ms=5)) as running:
        yield running


@pytest.fixture(autouse=True)
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "test-key")


def write_spec(tmp_path: Path, base_url: str, rows: int = 20, **extra: Any) -> Path:
    (tmp_path / "rows.jsonl").write_text("".join(f'{{"text": "row {i}"}}\n' for i in range(rows)))
    spec = {
        "name": "cli-test",
        "dataset": "rows.jsonl",  # relative to the spec file
        "variants": [
            {
                "name": "short",
                "messages": [{"role": "user", "content": "Summarize: {{ text }}"}],
                "model": "fake:gpt-4o-mini",
                "params": {"max_tokens": 16, "temperature": 0.2},
            },
            {
                "name": "long",
                "messages": [{"role": "user", "content": "Explain at length: {{ text }}"}],
                "model": "fake:gpt-4o-mini",
            },
        ],
        "endpoints": {"fake": {"kind": "openai", "base_url": base_url, "api_key_env": KEY_ENV}},
        "limits": {"fake": {"rpm": 6000, "concurrency": 8}},
        "retry": {"max_attempts": 3, "timeout_s": 10},
        **extra,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_run_prints_the_id_then_a_summary_and_exits_0(
    tmp_path: Path, server: RunningServer, db_path: Path
) -> None:
    result = CliRunner().invoke(main, ["run", str(write_spec(tmp_path, server.openai_base_url))])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("run run_")
    run_id = lines[0].split()[1]
    assert f"run {run_id}: completed" in result.stdout
    assert "succeeded 40, failed 0" in result.stdout
    assert server.stats()["successes"] == 40

    status = CliRunner().invoke(main, ["status"])
    assert status.exit_code == 0 and run_id in status.stdout and "40/40" in status.stdout
    detail = CliRunner().invoke(main, ["status", run_id])
    assert "completed" in detail.stdout and "succeeded=40" in detail.stdout
    with Store(db_path) as store:
        assert RunStore(store).summary(run_id)["succeeded"] == 40


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("variants: []\ndataset: rows.csv\n", "variants"),
        ("dataset: rows.txt\nvariants: [{messages: [{role: user, content: hi}]}]\n", ".csv"),
        ("dataset: missing.csv\nvariants: [{messages: [{role: user, content: hi}]}]\n", "missing"),
        ("dataset: rows.csv\nretry: {tries: 3}\nvariants: [{prompt: x}]\n", "retry"),
        ("dataset: rows.csv\nvariants: [{prompt: no-such-prompt}]\n", "no-such-prompt"),
        (
            "dataset: rows.csv\n"
            "variants: [{messages: [{role: user, content: hi}], model: nope:x}]\n",
            "unknown endpoint",
        ),
        # A pasted spec must not send a configured key, or any variable, to another host.
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\n"
            "endpoints: {openai: {base_url: 'http://127.0.0.1:9/v1'}}\n",
            "may not change base_url of a configured endpoint",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\n"
            "endpoints: {leak: {kind: openai, base_url: 'http://127.0.0.1:9/v1',"
            " api_key_env: OPENAI_API_KEY}}\n",
            "'OPENAI_API_KEY' is not allowed in a run spec",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\n"
            "endpoints: {leak: {kind: anthropic, base_url: 'http://127.0.0.1:9',"
            " api_key_env: HOME}}\n",
            "'HOME' is not allowed in a run spec",
        ),
    ],
)
def test_a_bad_spec_exits_2_with_the_field_named(
    tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / "rows.csv").write_text("text\nhello\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(content)
    result = CliRunner().invoke(main, ["run", str(spec)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("rows.jsonl", b'{"text": "a"}\nnot json\n', "rows.jsonl, line 2: not valid JSON"),
        ("rows.jsonl", b'{"text": "a"}\n["a list"]\n', "line 2: expected a JSON object"),
        ("rows.jsonl", b'{"text": "a \\ud800 b"}\n', "line 1: contains an unpaired surrogate"),
        ("rows.csv", b"", "no header row"),
        ("rows.csv", b"text\n\xff\xfe\n", "not UTF-8"),
    ],
)
def test_a_malformed_dataset_exits_2_before_any_run_exists(
    tmp_path: Path, db_path: Path, name: str, content: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"dataset: {name}\nvariants: [{{messages: [{{role: user, content: hi}}]}}]\n")
    result = CliRunner().invoke(main, ["run", str(spec)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output
    with Store(db_path) as store:
        assert RunStore(store).list_runs(10) == []


def test_status_lists_failed_rows_with_their_reason(tmp_path: Path) -> None:
    assert CliRunner().invoke(main, ["init", "--demo"]).exit_code == 0
    (tmp_path / "rows.csv").write_text(
        "title,article,max_words\nA,Some text.,40\nB,More text.,many\n"
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text("dataset: rows.csv\nvariants: [{prompt: article-summarizer@2.0.0}]\n")
    run = CliRunner().invoke(main, ["run", str(spec)])
    assert run.exit_code == 0, run.output
    run_id = run.stdout.split()[1]
    status = CliRunner().invoke(main, ["status", run_id])
    assert "failures: invalid_input=1" in status.stdout
    assert "dataset row 2 (article-summarizer@2.0.0)" in status.stdout
    assert "max_words: 'many' is not of type 'integer'" in status.stdout


def test_a_run_stopped_by_quota_exits_1_with_the_reason(tmp_path: Path) -> None:
    with serve_in_thread(FakeLLMConfig(port=0, quota_rate=1.0)) as quota_server:
        spec = write_spec(tmp_path, quota_server.openai_base_url)
        result = CliRunner().invoke(main, ["run", str(spec)])
    assert result.exit_code == 1, result.output
    assert "failed (stopped: quota" in result.stdout


def test_strict_exits_4_when_items_failed(tmp_path: Path) -> None:
    with serve_in_thread(FakeLLMConfig(port=0, context_window=20)) as small:
        spec = write_spec(tmp_path, small.openai_base_url, rows=3)
        result = CliRunner().invoke(main, ["run", str(spec), "--strict"])
    assert result.exit_code == 4, result.output
    assert "failed 6" in result.stdout


def test_resume_and_cancel_of_unknown_runs_fail_cleanly() -> None:
    for command in (["resume", "run_nope"], ["cancel", "run_nope"], ["status", "run_nope"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 1
        assert "no run with id" in result.stderr


def test_every_run_command_has_help() -> None:
    for name in ("run", "resume", "status", "cancel"):
        command = main.commands[name]
        assert command.help and command.help.strip()
