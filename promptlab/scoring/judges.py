"""Judges: a model grades each output against a rubric, through a run of its own.

When a run with a `judge` scorer ends, its succeeded results go to the judge as a run
of their own, `judge NAME: RUN NAME`. Each of its rows holds the original `input` (the
row's values but the expected column, one `name: value` line each), the `output` and
the `expected` answer, sent through the rubric (a registry prompt whose template uses
`{{ input }}`, `{{ output }}` and `{{ expected }}`, with an output schema holding the
verdict) at the judge's endpoint: its calls are recorded, traced and costed like any
run's. When that run ends, each answer's `field` becomes the original result's score
(`verdict_score`); a failed judge call leaves it unscored (`not_judged`). A failed
original request scores 0 at once (`no_output`), as with every scorer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptlab.scoring.scorers import Scorer, ScoreStatus, verdict_score
from promptlab.store.connection import Store
from promptlab.store.runs import RunStore
from promptlab.store.scores import ScoreStore

if TYPE_CHECKING:
    from promptlab.engine.spec import RunSpec


def judge_folder(db_path: Path) -> Path:
    """Where judge runs' datasets are written: beside the database, kept for resumes."""
    return db_path.parent / f"{db_path.name}.judges"


def submit_judges(
    store: Store, run_id: str, spec: RunSpec, submit: Callable[[RunSpec], str]
) -> list[str]:
    """Start a judge run per `judge` scorer of the finished run; their run ids."""
    from promptlab.engine.spec import parse_spec  # the spec module imports the scorers

    judges = [s for s in spec.scorers if s.kind == "judge"]
    if not judges or spec.expected is None:
        return []
    dataset = judge_folder(store.path) / f"{run_id}.jsonl"
    dataset.parent.mkdir(parents=True, exist_ok=True)
    scores = ScoreStore(store)
    failed = []
    with dataset.open("w", encoding="utf-8") as out:
        for batch in scores.finished_results(run_id):
            for r in batch:
                if not r.succeeded:
                    failed.append(r)
                    continue
                expected = r.row.get(spec.expected)
                line = {"key": r.key, "input": _input(r.row, spec.expected),
                        "output": r.output or "", "expected": "" if expected is None
                        else str(expected)}  # fmt: skip
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
    for judge in judges:
        scores.add([(r.key, run_id, r.variant, r.prompt_version_id, r.row_index, judge.name,
                     0.0, str(ScoreStatus.NO_OUTPUT), "no output") for r in failed])  # fmt: skip
    name = RunStore(store).get_run(run_id).name
    return [submit(parse_spec(_judge_spec(judge, dataset, name, run_id), trusted=True))
            for judge in judges]  # fmt: skip


def _judge_spec(judge: Scorer, dataset: Path, name: str, run_id: str) -> dict[str, Any]:
    variant: dict[str, Any] = {"name": judge.name, "prompt": judge.options["prompt"]}
    if judge.options.get("model"):
        variant["model"] = judge.options["model"]
    return {
        "name": f"judge {judge.name}: {name}"[:200],
        "dataset": str(dataset),
        "variants": [variant],
        "judging": {"run": run_id, "scorer": judge.name, "field": judge.options["field"]},
    }


def _input(row: Mapping[str, Any], expected: str) -> str:
    return "\n".join(f"{k}: {v}" for k, v in row.items() if k != expected)


def store_verdicts(store: Store, judge_run_id: str, judging: Mapping[str, Any]) -> int:
    """The judge run's answers as the scores of the run it judged; the count stored."""
    target, scorer, field = str(judging["run"]), str(judging["scorer"]), str(judging["field"])
    scores = ScoreStore(store)
    scores.clear(target, scorer, keep=str(ScoreStatus.NO_OUTPUT))
    stored = 0
    for batch in scores.finished_results(judge_run_id):
        verdicts = []
        for r in batch:
            score = verdict_score(r.output if r.succeeded else None, field)
            verdicts.append((str(r.row["key"]), score.value, str(score.status), score.detail))
        stored += scores.add_for_keys(target, scorer, verdicts)
    return stored
