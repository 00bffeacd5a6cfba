"""A run's plain scores: every finished result scored by the spec's scorers, and stored.

Called at each end of a run (promptlab/evaluation/ended.py): a run resumed and ended again
is scored again whole, so its scores always match its results. A failed request scores
0 (`no_output`): a version that errors is not right. Only the plain scorers' scores are
replaced: a judge's verdicts come from its own run (promptlab/evaluation/judges.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from promptlab.evaluation.scorers import Scorer
from promptlab.store.connection import Store
from promptlab.store.scores import ScoreRow, ScoreStore

if TYPE_CHECKING:
    from promptlab.engine.spec.runspec import RunSpec


def plain_scorers(spec: RunSpec) -> list[Scorer]:
    if spec.expected is None or spec.judging:
        return []
    return [s for s in spec.scorers if s.kind != "judge"]


def score_results(store: Store, run_id: str, spec: RunSpec) -> int:
    """Score the run's finished results against the spec's `expected` column; the rows
    stored."""
    scorers = plain_scorers(spec)
    if not scorers or spec.expected is None:
        return 0
    return _score(store, run_id, spec.expected, scorers)


def _score(store: Store, run_id: str, expected: str, scorers: Sequence[Scorer]) -> int:
    scores = ScoreStore(store)
    for scorer in scorers:
        scores.clear(run_id, scorer.name)
    stored = 0
    for batch in scores.finished_results(run_id):
        rows: list[ScoreRow] = []
        for result in batch:
            want = result.row.get(expected)
            output = result.output if result.succeeded else None
            for scorer in scorers:
                score = scorer.score(output, want, result.row)
                rows.append(
                    (
                        result.key,
                        run_id,
                        result.variant,
                        result.prompt_version_id,
                        result.row_index,
                        scorer.name,
                        score.value,
                        str(score.status),
                        score.detail or None,
                    )
                )
        scores.add(rows)
        stored += len(rows)
    return stored
