"""After-run work runs once per run end (promptlab/evaluation/ended.py), whatever the path:
pause and resume, cancel (running or paused) and resume, kill -9 of `promptlab run` and
`promptlab resume`, a run that fails. Every kind of work is in each spec: a plain
scorer, a judge, a cross-check's validation run, its decisions and review queue, and
the anomaly alerts. Judge calls are counted where they land: a fakellm of their own.

The judge's endpoint and the models' are declared in the spec (`endpoints:`), as a
user writes them; a judge that could not run is refused at submit in one line, and a
judge run that fails is shown (status, metrics, exit code 5).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from promptlab.cli import main
from promptlab.cli.common import EXIT_AFTER_RUN_FAILED
from promptlab.config import Settings
from promptlab.engine.ended import RunEnd, spec_submit
from promptlab.engine.spec.runspec import parse_spec
from promptlab.errors import SpecError
from promptlab.evaluation.ended import run_ended
from promptlab.evaluation.judges import StaleJudge, store_verdicts
from promptlab.facades.run_view import RunView
from promptlab.fakellm.server import RunningServer
from promptlab.prompts.files import parse_prompt_data
from promptlab.records import RunStatus
from promptlab.server.typed import from_wire, to_wire
from promptlab.store.afterrun import AfterRunStore
from promptlab.store.review import ReviewStore
from promptlab.workbench import Workbench
from promptlab.yamlio import parse_yaml
from tests.fakellm_fixtures import ServerFactory

PAGES = Path(__file__).resolve().parent.parent / "pages"
ROWS = 16
#: Answers the models' fakellm sends before it holds requests.
ANSWERED = 6
VALIDATION_ROWS = 4
MODELS = ["fake:a", "fake:b"]
#: Seconds any one condition may take before the test gives up (never reached when well).
PATIENCE_S = 60.0

RUBRIC = """
name: grader
versions:
  - version: 1.0.0
    params: {model: "judgellm:grader", max_tokens: 30}
    variables:
      input: {type: string}
      output: {type: string}
      expected: {type: string}
    output_schema:
      type: object
      required: [score]
      properties: {score: {type: number, minimum: 0, maximum: 1}}
    messages:
      - role: user
        content: "Grade 0 to 1 as JSON with a score: {{ input }} / {{ output }} / {{ expected }}"
"""

EVERY_WORK = {
    "scores": "done",
    "alerts": "done",
    "judge graded": "done",
    "crosscheck validation": "done",
    "crosscheck": "done",
}


def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for `condition` (polled): the test waits on what happens, not on time."""
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def _csv(path: Path, rows: range) -> Path:
    path.write_text("text,label\n" + "".join(f"ticket {i},label {i % 3}\n" for i in rows))
    return path


def spec_data(
    tmp_path: Path, llm: RunningServer, judge: RunningServer, name: str, *, crosscheck: bool = True
) -> dict[str, Any]:
    """Every kind of after-run work, on endpoints the spec declares."""
    data: dict[str, Any] = {
        "name": name,
        "dataset": str(_csv(tmp_path / f"{name}.csv", range(ROWS))),
        "expected": "label",
        "variants": [
            {
                "messages": [{"role": "user", "content": "Label {{ text }}"}],
                "params": {"max_tokens": 8},
            }
        ],
        "scorers": ["exact", {"kind": "judge", "name": "graded", "prompt": "grader"}],
        "endpoints": {
            "fake": {"kind": "openai", "base_url": llm.openai_base_url, "concurrency": 2},
            "judgellm": {"kind": "openai", "base_url": judge.openai_base_url, "concurrency": 4},
        },
    }
    if crosscheck:
        valid = _csv(tmp_path / f"{name}-valid.csv", range(100, 100 + VALIDATION_ROWS))
        data["crosscheck"] = {"models": MODELS, "validation": str(valid)}
    else:
        data["variants"][0]["model"] = "fake:m"
    return data


@pytest.fixture
def servers(fakellm_factory: ServerFactory) -> tuple[RunningServer, RunningServer]:
    """The models' fakellm, answering ANSWERED requests and holding the next ones (in
    flight: the run cannot end before the test has acted), and the judge's own."""
    llm = fakellm_factory()
    llm.gate(ANSWERED)
    return llm, fakellm_factory()


def held_mid_run(llm: RunningServer) -> None:
    """Wait until ANSWERED answers went out and both of the endpoint's slots hold a
    request: nothing more is sent until the gate opens."""
    until(lambda: (s := llm.stats())["successes"] == ANSWERED and s["held"] == 2, "a held run")


def then_open(llm: RunningServer) -> None:
    """Open the gate after a pause, cancel or kill: the requests in flight finish.
    (The engine's halt was queued on its loop before they can come back.)"""
    llm.gate(None)


@pytest.fixture
def wb(db_path: Path) -> Iterator[Workbench]:
    with Workbench.open(Settings.from_env()) as workbench:
        data = parse_yaml(RUBRIC, where="rubric", error=SpecError)
        workbench.prompts.import_file(parse_prompt_data(data, "rubric"))
        yield workbench


def judge_calls(judge: RunningServer) -> int:
    return int(judge.stats()["attempts"])


def children(wb: Workbench, name: str) -> dict[str, list[str]]:
    """The judge and validation runs started for the run called `name`."""
    listed = [r.run for r in wb.runs.list(200)]
    return {
        "judge": [r.run_id for r in listed if r.name == f"judge graded: {name}"],
        "validation": [r.run_id for r in listed if r.name == f"validate crosscheck: {name}"],
    }


def work_of(wb: Workbench, run_id: str) -> dict[str, str]:
    return {r.work: r.state for r in AfterRunStore(wb.store).for_run(run_id)}


def nothing_ran(wb: Workbench, run_id: str, name: str, judge: RunningServer) -> None:
    assert work_of(wb, run_id) == {}
    assert children(wb, name) == {"judge": [], "validation": []}
    assert wb.analysis.scores(run_id) == [] and judge_calls(judge) == 0


def only_local_work(wb: Workbench, run_id: str, name: str, judge: RunningServer) -> None:
    """A cancelled or failed end: what finished is scored, alerts rerun; nothing started."""
    assert work_of(wb, run_id) == {"scores": "done", "alerts": "done"}
    assert children(wb, name) == {"judge": [], "validation": []}
    assert judge_calls(judge) == 0
    assert ReviewStore(wb.store).items("open", run_id) == []


def ended_once(wb: Workbench, run_id: str, name: str, judge: RunningServer) -> None:
    """The run completed: one judge run and one validation run, every result judged
    once, each row decided once and the doubtful ones queued once."""
    found = children(wb, name)
    assert len(found["judge"]) == 1 and len(found["validation"]) == 1, found
    for child in (*found["judge"], *found["validation"]):
        assert wb.runs.wait(child, timeout=PATIENCE_S).status == RunStatus.COMPLETED
    view = wb.runs.view(run_id)
    assert view.status == RunStatus.COMPLETED and view.counts.succeeded == ROWS * len(MODELS)
    assert judge_calls(judge) == view.counts.succeeded  # each result judged once
    assert work_of(wb, run_id) == EVERY_WORK and view.after_run_failures == []
    counts = {(c.label, c.scorer): c for c in wb.analysis.scores(run_id)}
    for model in MODELS:
        graded = counts[(model, "graded")]
        assert graded.scored + graded.not_judged == ROWS  # verdicts of one judge run
        assert counts[(model, "exact")].scored == ROWS
    with wb.store.read() as cur:
        decided = cur.execute(
            "SELECT count(*), count(*) FILTER (WHERE decision = 'review') "
            "FROM crosscheck_decisions WHERE run_id = ?",
            [run_id],
        ).fetchone()
    assert decided is not None and decided[0] == ROWS
    assert len(ReviewStore(wb.store).items("open", run_id)) == decided[1]
    # A second end of the same run (a trigger come again) starts nothing.
    spec = parse_spec(view.run.spec, trusted=True)
    submit = spec_submit(wb.engine.submit)
    run_ended(RunEnd(wb.store, run_id, spec, RunStatus.COMPLETED, None, submit))
    assert children(wb, name) == found and judge_calls(judge) == view.counts.succeeded
    assert work_of(wb, run_id) == EVERY_WORK


def test_pause_then_resume_runs_the_after_run_work_once_at_completion(
    tmp_path: Path, wb: Workbench, servers: tuple[RunningServer, RunningServer]
) -> None:
    llm, judge = servers
    run_id = wb.runs.start(parse_spec(spec_data(tmp_path, llm, judge, "paused")))
    held_mid_run(llm)
    wb.runs.pause(run_id)
    then_open(llm)
    assert wb.runs.wait(run_id, timeout=PATIENCE_S).status == RunStatus.PAUSED
    nothing_ran(wb, run_id, "paused", judge)  # a pause is not an end
    wb.runs.resume(run_id)
    assert wb.runs.wait(run_id, timeout=PATIENCE_S).status == RunStatus.COMPLETED
    ended_once(wb, run_id, "paused", judge)


def test_a_stale_judge_run_cannot_overwrite_the_verdicts_of_the_current_one(
    tmp_path: Path, wb: Workbench, servers: tuple[RunningServer, RunningServer]
) -> None:
    llm, judge = servers
    llm.gate(None)  # nothing to hold here
    run_id = wb.runs.start(parse_spec(spec_data(tmp_path, llm, judge, "s", crosscheck=False)))
    assert wb.runs.wait(run_id, timeout=PATIENCE_S).status == RunStatus.COMPLETED
    (judged,) = children(wb, "s")["judge"]
    assert wb.runs.wait(judged, timeout=PATIENCE_S).status == RunStatus.COMPLETED
    before = wb.analysis.scores(run_id)
    # A newer judge run of the same (run, scorer) is the current one now (as when an
    # older version started one on a pause and another on the resume).
    newer = wb.runs.start(parse_spec(spec_data(tmp_path, llm, judge, "n", crosscheck=False)))
    with wb.store.transaction() as tx:
        tx.execute(
            "UPDATE after_run SET child_run_id = ? WHERE run_id = ? AND work = 'judge graded'",
            [newer, run_id],
        )
    judging = parse_spec(wb.runs.view(judged).run.spec, trusted=True).judging
    assert judging is not None
    with pytest.raises(StaleJudge, match=f"{newer} is"):
        store_verdicts(wb.store, judged, judging)
    assert wb.analysis.scores(run_id) == before
    wb.runs.wait(newer, timeout=PATIENCE_S)


@pytest.mark.parametrize("while_paused", [False, True], ids=["running", "paused"])
def test_cancel_scores_what_finished_and_the_resumed_completion_runs_the_rest_once(
    tmp_path: Path,
    wb: Workbench,
    servers: tuple[RunningServer, RunningServer],
    while_paused: bool,
) -> None:
    llm, judge = servers
    run_id = wb.runs.start(parse_spec(spec_data(tmp_path, llm, judge, "cancelled")))
    held_mid_run(llm)
    if while_paused:
        wb.runs.pause(run_id)
        then_open(llm)
        assert wb.runs.wait(run_id, timeout=PATIENCE_S).status == RunStatus.PAUSED
    wb.runs.cancel(run_id)
    then_open(llm)
    assert wb.runs.wait(run_id, timeout=PATIENCE_S).status == RunStatus.CANCELLED
    only_local_work(wb, run_id, "cancelled", judge)
    exact = {c.label: c for c in wb.analysis.scores(run_id) if c.scorer == "exact"}
    assert sum(c.scored for c in exact.values()) == wb.runs.view(run_id).counts.succeeded
    wb.runs.resume(run_id)
    assert wb.runs.wait(run_id, timeout=PATIENCE_S).status == RunStatus.COMPLETED
    ended_once(wb, run_id, "cancelled", judge)


def test_a_failed_run_scores_what_finished_and_starts_no_judge(
    tmp_path: Path, wb: Workbench, fakellm_factory: ServerFactory
) -> None:
    refusing, judge = fakellm_factory(quota_rate=1.0), fakellm_factory()
    run_id = wb.runs.start(parse_spec(spec_data(tmp_path, refusing, judge, "failing")))
    view = wb.runs.wait(run_id, timeout=PATIENCE_S)
    assert view.status == RunStatus.FAILED and "quota" in (view.reason or "")
    only_local_work(wb, run_id, "failing", judge)


def test_kill_9_of_promptlab_run_and_resume_judge_each_result_once(
    tmp_path: Path, db_path: Path, servers: tuple[RunningServer, RunningServer]
) -> None:
    llm, judge = servers
    with Workbench.open(Settings.from_env()) as wb:
        data = parse_yaml(RUBRIC, where="rubric", error=SpecError)
        wb.prompts.import_file(parse_prompt_data(data, "rubric"))
    spec = tmp_path / "killed.yaml"
    spec.write_text(yaml.safe_dump(spec_data(tmp_path, llm, judge, "killed")))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "promptlab", "run", str(spec), "--quiet"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()
        assert first.startswith("run "), first + proc.stderr.read().decode()
        run_id = first.split()[1]
        held_mid_run(llm)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    then_open(llm)
    with Workbench.open(Settings.from_env()) as wb:
        nothing_ran(wb, run_id, "killed", judge)
    resumed = subprocess.run(
        [sys.executable, "-m", "promptlab", "resume", run_id, "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    with Workbench.open(Settings.from_env()) as wb:
        ended_once(wb, run_id, "killed", judge)


def test_a_judge_on_an_unknown_endpoint_is_refused_at_submit_in_one_line(
    tmp_path: Path, wb: Workbench, servers: tuple[RunningServer, RunningServer]
) -> None:
    llm, judge = servers
    data = spec_data(tmp_path, llm, judge, "refused", crosscheck=False)
    data["scorers"][1]["model"] = "nowhere:grader"
    with pytest.raises(SpecError) as refused:
        wb.runs.start(parse_spec(data))
    said = str(refused.value)
    assert "\n" not in said and said.startswith("scorers[1] (judge graded): unknown endpoint")
    assert "'nowhere'" in said and wb.runs.list() == []


def test_a_judge_run_that_fails_shows_in_status_metrics_the_page_and_the_exit_code(
    tmp_path: Path, db_path: Path, fakellm_factory: ServerFactory
) -> None:
    llm, refusing = fakellm_factory(), fakellm_factory(quota_rate=1.0)
    with Workbench.open(Settings.from_env()) as wb:
        data = parse_yaml(RUBRIC, where="rubric", error=SpecError)
        wb.prompts.import_file(parse_prompt_data(data, "rubric"))
    spec = tmp_path / "judged.yaml"
    spec.write_text(yaml.safe_dump(spec_data(tmp_path, llm, refusing, "judged", crosscheck=False)))
    cli = CliRunner()
    ran = cli.invoke(main, ["run", str(spec), "--quiet"])
    assert ran.exit_code == EXIT_AFTER_RUN_FAILED, ran.output
    run_id = ran.stdout.split()[1]
    assert f"run {run_id}: completed; after-run work failed" in ran.stdout
    assert "after-run work failed: judge graded: failed (run " in ran.stdout
    status = cli.invoke(main, ["status", run_id])
    assert status.exit_code == 0 and "completed; after-run work failed" in status.output
    assert "stopped: quota" in status.output and "promptlab resume" in status.output
    metrics = cli.invoke(main, ["metrics", "--run", run_id])
    assert f"run {run_id}: judge graded: failed" in metrics.output, metrics.output
    with Workbench.open(Settings.from_env()) as wb:
        view = wb.runs.view(run_id)
        assert [line.split(" (")[0] for line in view.after_run_failures] == ["judge graded: failed"]
        # Through a server the CLI reads the same record (typed routes).
        wire = from_wire(RunView, json.loads(to_wire(RunView, view)))
        assert wire.after_run == view.after_run
    page = AppTest.from_file(str(PAGES / "runs.py"), default_timeout=30)
    page.query_params["run"] = run_id
    page.run()
    assert not page.exception
    shown = [e.value.replace("\\", "") for e in page.error]  # markdown escapes undone
    assert any("After-run work failed: judge graded: failed" in e for e in shown), shown
