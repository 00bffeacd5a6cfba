"""Judges: a model grades each output against a rubric, through a run of its own.

When a run with a `judge` scorer completes (promptlab/evaluation/ended.py: once, keyed by
run and scorer), its succeeded results go to the judge as a run of their own, `judge
NAME: RUN NAME`, with the endpoints the judged spec declares. Each of its rows holds
the original `input` (the row's values but the expected column, one `name: value` line
each), the `output` and the `expected` answer, sent through the rubric (a registry
prompt whose template uses `{{ input }}`, `{{ output }}` and `{{ expected }}`, with an
output schema holding the verdict) at the judge's endpoint: its calls are recorded,
traced and costed like any run's. When that run ends, each answer's `field` becomes
the original result's score (`verdict_score`), unless a newer judge run of the same
run and scorer is recorded; a failed judge call leaves it unscored (`not_judged`). A
failed original request scores 0 at once (`no_output`), as with every scorer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptlab.evaluation.scorers import Scorer, ScoreStatus, verdict_score
from promptlab.store.afterrun import AfterRunStore
from promptlab.store.connection import Store
from promptlab.store.runs import RunStore
from promptlab.store.scores import ScoreStore

if TYPE_CHECKING:
    from promptlab.engine.spec.runspec import RunSpec


def judge_folder(db_path: Path) -> Path:
    """Where judge runs' datasets are written: beside the database, kept for resumes."""
    return db_path.parent / f"{db_path.name}.judges"


def write_judge_dataset(store: Store, run_id: str, spec: RunSpec) -> Path:
    """The run's succeeded results as the judges' dataset (one file, shared by its
    judges); each judge's `no_output` score for every failed result is stored."""
    assert spec.expected is not None
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
                line = {
                    "key": r.key,
                    "input": _input(r.row, spec.expected),
                    "output": r.output or "",
                    "expected": "" if expected is None else str(expected),
                }
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
    for judge in judges_of(spec):
        scores.clear(run_id, judge.name)
        scores.add(
            [
                (
                    r.key,
                    run_id,
                    r.variant,
                    r.prompt_version_id,
                    r.row_index,
                    judge.name,
                    0.0,
                    str(ScoreStatus.NO_OUTPUT),
                    "no output",
                )
                for r in failed
            ]
        )
    return dataset


def judges_of(spec: RunSpec) -> list[Scorer]:
    return [s for s in spec.scorers if s.kind == "judge"] if spec.expected is not None else []


def judge_spec(judge: Scorer, dataset: Path, spec: RunSpec, run_id: str) -> dict[str, Any]:
    """The judge's run's spec (a mapping, parsed where it is submitted): its rubric over
    `dataset`, with the judged spec's endpoints (a judge may name an endpoint the spec
    declares), limits and executor."""
    variant: dict[str, Any] = {"name": judge.name, "prompt": judge.options["prompt"]}
    if judge.options.get("model"):
        variant["model"] = judge.options["model"]
    data: dict[str, Any] = {
        "name": f"judge {judge.name}: {spec.name}"[:200],
        "dataset": str(dataset),
        "variants": [variant],
        "judging": {"run": run_id, "scorer": judge.name, "field": judge.options["field"]},
    }
    for carried in ("endpoints", "local_endpoints", "executor"):
        if spec.raw.get(carried):
            data[carried] = spec.raw[carried]
    limits = spec.raw.get("limits") or {}
    if limits:
        data["limits"] = limits
    return data


def _input(row: Mapping[str, Any], expected: str) -> str:
    return "\n".join(f"{k}: {v}" for k, v in row.items() if k != expected)


def store_verdicts(store: Store, judge_run_id: str, judging: Mapping[str, Any]) -> int:
    """The judge run's answers as the scores of the run it judged; the count stored.

    Only the judge run recorded for (run, scorer) stores them (`StaleJudge` otherwise):
    another judge run of the same scorer (one an older version started on a pause) may
    not overwrite the verdicts of the current one, whichever ends last."""
    target, scorer, field = str(judging["run"]), str(judging["scorer"]), str(judging["field"])
    current = AfterRunStore(store).get(target, f"judge {scorer}")
    if current is not None and current.child_run_id not in (None, judge_run_id):
        runs = RunStore(store)
        if runs.get_run(current.child_run_id).submitted_at >= (
            runs.get_run(judge_run_id).submitted_at
        ):
            raise StaleJudge(
                f"run {judge_run_id} is not the judge run of {target} for {scorer} "
                f"({current.child_run_id} is): its verdicts are not stored"
            )
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


class StaleJudge(Exception):
    """A judge run's verdicts refused: a newer judge run of the same (run, scorer) exists."""
