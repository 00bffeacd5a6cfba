"""A run's scores: every finished result scored by the spec's scorers, and stored.

The engine calls `score_run` when a run ends (whatever its state: what finished is
scored), off its loop; a resumed run is scored again whole, so its scores always match
its results. A failed request scores 0 (`no_output`): a version that errors is not right.
A `judge` scorer starts a run of its own, and that run's end stores its verdicts
(promptlab/scoring/judges.py); a cross-checked run is decided row by row, after its
validation run when it has one (promptlab/scoring/crossruns.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from promptlab.scoring.crossruns import crosscheck_ended, validation_ended
from promptlab.scoring.judges import store_verdicts, submit_judges
from promptlab.scoring.scorers import Scorer
from promptlab.store.connection import Store
from promptlab.store.scores import ScoreRow, ScoreStore

if TYPE_CHECKING:
    from promptlab.engine.spec import RunSpec

log = logging.getLogger(__name__)


def score_run(store: Store, run_id: str, spec: RunSpec, submit: Callable[[RunSpec], str]) -> int:
    """Score the run's finished results against the spec's `expected` column and start
    its judges' runs (with `submit`), or, for a judge's own run, store its verdicts; the
    rows stored. A failure is logged: the results stand without their scores."""
    try:
        if spec.judging:
            return store_verdicts(store, run_id, spec.judging)
        stored = 0
        if spec.expected is not None:
            plain = [s for s in spec.scorers if s.kind != "judge"]
            stored = _score(store, run_id, spec.expected, plain)
            submit_judges(store, run_id, spec, submit)
        if spec.validating is not None:
            validation_ended(store, run_id, spec)
        elif spec.crosscheck is not None:
            crosscheck_ended(store, run_id, spec, submit)
        return stored
    except Exception:  # noqa: BLE001 - scores are derived; the run's results are what counts
        log.exception("run %s: scoring failed", run_id)
        return 0


def _score(store: Store, run_id: str, expected: str, scorers: Sequence[Scorer]) -> int:
    scores = ScoreStore(store)
    scores.clear(run_id)  # a judge's verdicts too: its run is started again
    stored = 0
    for batch in scores.finished_results(run_id):
        rows: list[ScoreRow] = []
        for result in batch:
            want = result.row.get(expected)
            output = result.output if result.succeeded else None
            for scorer in scorers:
                score = scorer.score(output, want, result.row)
                rows.append((result.key, run_id, result.variant, result.prompt_version_id,
                             result.row_index, scorer.name, score.value, str(score.status),
                             score.detail or None))  # fmt: skip
        scores.add(rows)
        stored += len(rows)
    return stored
