"""Scores against expected answers: each scorer (malformed outputs and missing expected
values are scored as such, never crash), spec refusals, and a run scored end to end on a
scripted model that is right on a fixed 80% of rows: reported 80% with a Wilson interval,
compared per variant, printed by `promptlab metrics`."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from promptlab.analysis.intervals import score_interval
from promptlab.analysis.stats import wilson_interval
from promptlab.cli import main
from promptlab.config import Settings
from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import SpecError
from promptlab.evaluation.ended import run_ended
from promptlab.evaluation.scorers import ScoreStatus, parse_scorers
from promptlab.records import RunStatus
from promptlab.store import Store
from promptlab.store.audit import AuditFilter
from promptlab.store.scores import ScoreStore
from promptlab.workbench import Workbench
from tests.test_run_dependencies import ENDPOINTS


def one(kind: Any, output: str | None, expected: Any, row: dict[str, Any] | None = None) -> Any:
    (scorer,) = parse_scorers([kind])
    return scorer.score(output, expected, row or {})


@pytest.mark.parametrize(
    ("kind", "output", "expected", "value", "status"),
    [
        ({"kind": "exact", "normalize": ["case", "whitespace"]}, " Paris ", "paris", 1.0, "scored"),
        ("exact", "Paris", "paris", 0.0, "scored"),
        ({"kind": "exact", "normalize": ["punctuation"]}, "Paris.", "Paris", 1.0, "scored"),
        ("contains", "The answer is Paris.", "Paris", 1.0, "scored"),
        ("regex", "order #A-1234 shipped", r"#A-\d{4}", 1.0, "scored"),
        ({"kind": "regex", "pattern": r"^\d+$"}, "12a", "x", 0.0, "scored"),
        ("regex", "text", "(a", 0.0, "malformed"),  # an expected pattern RE2 refuses
        ({"kind": "json_field", "path": "label"}, '{"label": "spam"}', "spam", 1.0, "scored"),
        ({"kind": "json_field", "path": "n"}, '{"n": 3}', 3, 1.0, "scored"),
        ({"kind": "json_field", "path": "a.0"}, '```json\n{"a": ["x"]}\n```', "x", 1.0, "scored"),
        ({"kind": "json_field", "path": "label"}, "no json here", "spam", 0.0, "malformed"),
        ({"kind": "json_field", "path": "label"}, '{"other": 1}', "spam", 0.0, "malformed"),
        ({"kind": "numeric", "tolerance": 0.5}, "about 41.7 km", "42", 1.0, "scored"),
        ({"kind": "numeric", "relative": 0.01}, "101.5", 100, 0.0, "scored"),
        ({"kind": "numeric"}, "no digits", "4", 0.0, "malformed"),
        ({"kind": "numeric"}, "4", "n/a", 0.0, "malformed"),
        ("set_overlap", '["a", "B", "c"]', "a, b, d", 2 / 3, "scored"),
        ({"kind": "set_overlap", "separator": ";"}, "a;b", "a;b", 1.0, "scored"),
        (
            {"kind": "expression", "expr": "size(output) <= 5 and expected in output"},
            "ok!",
            "ok",
            1.0,
            "scored",
        ),
        ({"kind": "expression", "expr": "parsed.score / 10"}, '{"score": 7}', "x", 0.7, "scored"),
        ({"kind": "expression", "expr": "parsed.score"}, '{"score": 70}', "x", 0.0, "malformed"),
        ("exact", None, "Paris", 0.0, "no_output"),
        ("exact", "Paris", "   ", None, "no_expected"),
        ("exact", "Paris", None, None, "no_expected"),
    ],
)
def test_each_scorer(kind: Any, output: str | None, expected: Any, value: Any, status: str) -> None:
    score = one(kind, output, expected)
    assert score.status == ScoreStatus(status), score
    assert score.value == pytest.approx(value) if value is not None else score.value is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scorers": ["exact"]}, "scorers: need `expected:`"),
        ({"expected": "answer", "scorers": [{"kind": "bleu"}]}, r"scorers\[0\].kind: one of"),
        (
            {"expected": "answer", "scorers": [{"kind": "regex", "pattern": "(a"}]},
            r"scorers\[0\].pattern: ",
        ),
        (
            {"expected": "answer", "scorers": [{"kind": "expression", "expr": "open('x')"}]},
            "only these functions may be called",
        ),
        ({"expected": "answer", "scorers": [{"kind": "json_field"}]}, "json_field needs"),
        ({"expected": "answer", "scorers": ["exact", "exact"]}, "names must be unique"),
        ({"expected": "answer", "scorers": [{"kind": "numeric", "tolerance": -1}]}, "tolerance"),
    ],
)
def test_a_bad_scorer_is_refused_naming_it(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"dataset": "rows.csv", "variants": [{"prompt": "p"}], **data})


def _dataset(path: Path, rows: int) -> Path:
    """Row i expects the scripted model's answer, except every fifth row: 80% right."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "answer", "user"])
        for i in range(rows):
            right = f"answer to Summarize: row {i}"
            writer.writerow([f"row {i}", right if i % 5 else "something else", f"u{i % 7}"])
    return path


def _spec(dataset: Path) -> Any:
    def variant(name: str, verb: str) -> dict[str, Any]:
        messages = [{"role": "user", "content": verb + ": {{ text }}"}]
        return {
            "name": name,
            "messages": messages,
            "model": "fake:m1",
            "params": {"max_tokens": 20},
        }

    return parse_spec(
        {
            "name": "scored",
            "dataset": str(dataset),
            "expected": "answer",
            "scorers": ["exact", {"kind": "contains", "name": "mentions the row"}],
            "variants": [variant("summarize", "Summarize"), variant("explain", "Explain")],
        }
    )


@pytest.fixture
def scored_run(tmp_path: Path, db_path: Path) -> Iterator[tuple[Store, str]]:
    with Store(db_path) as store:
        provider = ScriptedProvider()
        with Engine(
            store,
            endpoints=ENDPOINTS,
            provider_factory=lambda _cfg: provider,
            on_run_ended=run_ended,
        ) as eng:
            run_id = eng.submit(_spec(_dataset(tmp_path / "qa.csv", 50)))
            assert eng.wait(run_id, timeout=60).status == RunStatus.COMPLETED
        yield store, run_id


def test_a_model_right_on_80_percent_of_rows_is_reported_80_percent_with_wilson(
    scored_run: tuple[Store, str],
) -> None:
    store, run_id = scored_run
    counts = {(c.label, c.scorer): c for c in ScoreStore(store).counts(run_id)}
    exact = counts[("summarize", "exact")]
    assert (exact.scored, exact.right, exact.mean) == (50, 40, 0.8)
    assert exact.binary and score_interval(exact) == wilson_interval(40, 50)
    assert counts[("explain", "exact")].mean == 0.0
    assert counts[("summarize", "mentions the row")].mean == 0.8
    across = {(c.label, c.scorer) for c in ScoreStore(store).counts()}
    assert ("fake-inline", "exact") not in across and len(across) == 4  # per version too


def test_scores_are_compared_per_unit_and_printed_by_metrics(
    scored_run: tuple[Store, str],
) -> None:
    store, run_id = scored_run
    store.close()
    with Workbench.open(Settings.from_env()) as wb:
        table = wb.analysis.compare(run_id)
    rows = {(r.metric, r.variant): r for r in table.rows}
    row = rows[("score: exact", "explain")]
    assert (row.control_value, row.variant_value) == (0.8, 0.0)
    assert row.analysed_by == "row" and str(row.verdict) == "worse"
    out = CliRunner().invoke(main, ["metrics", "--run", run_id]).output
    assert "scores against expected answers" in out
    line = next(x for x in out.splitlines() if "summarize" in x and " exact " in x)
    ci = wilson_interval(40, 50)
    assert " 80.0% " in line and f"[{ci.low:.1%}, {ci.high:.1%}]" in line and "scored 50" in line
    data = json.loads(CliRunner().invoke(main, ["metrics", "--run", run_id, "--json"]).output)
    by_variant = {row["variant"]: row for row in data}
    exact = {s["scorer"]: s for s in by_variant["summarize"]["scores"]}["exact"]
    assert (exact["mean"], exact["scored"], exact["right"], exact["binary"]) == (0.8, 50, 40, True)
    assert (exact["low"], exact["high"]) == (ci.low, ci.high)
    assert {s["scorer"] for s in by_variant["explain"]["scores"]} == {"exact", "mentions the row"}


def test_the_runs_and_compare_pages_show_the_scores(tmp_path: Path) -> None:
    from streamlit.testing.v1 import AppTest

    from promptlab.ui.resources import get_workbench

    pages = Path(__file__).resolve().parent.parent / "pages"
    data = dict(_spec(_dataset(tmp_path / "qa.csv", 20)).raw)
    for variant in data["variants"]:
        variant["model"] = "sim:fast"  # the app's own engine: no scripted provider there
    wb = get_workbench()
    run_id = wb.runs.start(wb.runs.spec_from_data(data))
    assert wb.runs.wait(run_id, timeout=60).status == RunStatus.COMPLETED
    runs = AppTest.from_file(str(pages / "runs.py"), default_timeout=30).run()
    assert not runs.exception
    table = next(d.value for d in runs.dataframe if "scorer" in d.value.columns)
    assert sorted(set(table["scorer"])) == ["exact", "mentions the row"]
    assert list(table["scored"]) == [20, 20, 20, 20]
    compare = AppTest.from_file(str(pages / "compare.py"), default_timeout=30)
    compare.query_params["run"] = run_id
    compare.run()
    assert not compare.exception
    shown_metrics = {m for d in compare.dataframe for m in d.value.get("metric", [])}
    assert "score: exact" in shown_metrics
    compare.session_state["compare_tab"] = "Charts"  # the figures' tab (a click on it)
    compare.run()
    rates = next(c for c in compare.get("plotly_chart") if "Rates" in c.proto.spec)
    assert "score: exact" in rates.proto.spec  # a bar per variant, per-unit interval


RUBRIC = """
name: grader
versions:
  - version: 1.0.0
    params: {model: "sim:fast", max_tokens: 60}
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
        content: |
          Grade the answer from 0 to 1 as JSON with a score.
          Question: {{ input }}
          Answer: {{ output }}
          Expected: {{ expected }}
"""


def test_a_judge_grades_through_a_run_of_its_own_recorded_and_costed(
    tmp_path: Path, db_path: Path
) -> None:
    from promptlab.prompts.files import parse_prompt_data
    from promptlab.yamlio import parse_yaml

    with Workbench.open(Settings.from_env()) as wb:
        wb.prompts.import_file(
            parse_prompt_data(parse_yaml(RUBRIC, where="rubric", error=SpecError), "rubric")
        )
        data = dict(_spec(_dataset(tmp_path / "qa.csv", 12)).raw)
        data["variants"] = [{**v, "model": "sim:fast"} for v in data["variants"]]
        data["scorers"] = ["exact", {"kind": "judge", "prompt": "grader@1.0.0"}]
        missing = {**data, "scorers": [{"kind": "judge", "prompt": "nope"}]}
        with pytest.raises(SpecError, match=r"scorers\[0\].prompt: "):
            wb.runs.start(wb.runs.spec_from_data(missing))
        run_id = wb.runs.start(wb.runs.spec_from_data(data))
        assert wb.runs.wait(run_id, timeout=60).status == RunStatus.COMPLETED
        judged = next(r.run for r in wb.runs.list() if r.run.name == "judge judge: scored")
        assert wb.runs.wait(judged.run_id, timeout=60).status == RunStatus.COMPLETED
        counts = {(c.label, c.scorer): c for c in wb.analysis.scores(run_id)}
        judge = counts[("summarize", "judge")]
        # The simulated judge answers deterministically; an answer it breaks is no verdict.
        assert judge.scored + judge.not_judged == 12 and judge.scored >= 6
        assert judge.mean is not None and 0 <= judge.mean <= 1
        assert not judge.binary and score_interval(judge) is not None
        view = wb.runs.view(judged.run_id)
        assert view.summary.cost_usd > 0 and view.counts.succeeded == 24  # both variants
        trace = wb.audit.events(AuditFilter(run_id=judged.run_id))
        assert {"run.submitted", "result"} <= {e.kind for e in trace}  # traced like any run


def test_promptlab_run_waits_for_its_judge_and_metrics_shows_the_verdicts(
    tmp_path: Path, db_path: Path
) -> None:
    import yaml

    (tmp_path / "grader.yaml").write_text(RUBRIC)
    cli = CliRunner()
    assert cli.invoke(main, ["prompt", "add", str(tmp_path / "grader.yaml")]).exit_code == 0
    data = dict(_spec(_dataset(tmp_path / "qa.csv", 6)).raw)
    data["variants"] = [{**v, "model": "sim:fast"} for v in data["variants"]]
    data["scorers"] = [{"kind": "judge", "name": "graded", "prompt": "grader"}]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(data))
    ran = cli.invoke(main, ["run", str(tmp_path / "spec.yaml"), "--quiet"])
    assert ran.exit_code == 0, ran.output
    assert "waiting for judge graded: scored" in ran.stderr
    run_id = ran.stdout.split()[1]
    out = cli.invoke(main, ["metrics", "--run", run_id]).output
    assert any("graded" in line and "scored" in line for line in out.splitlines()), out
