"""A run's scores: every finished result scored by the spec's scorers, and stored.

The engine calls `score_run` when a run ends (whatever its state: what finished is
scored), off its loop; a resumed run is scored again whole, so its scores always match
its results. A failed request scores 0 (`no_output`): a version that errors is not right.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from promptlab.scoring.scorers import Scorer
from promptlab.store.connection import Store
from promptlab.store.scores import ScoreRow, ScoreStore

log = logging.getLogger(__name__)


def score_run(store: Store, run_id: str, expected: str | None, scorers: Sequence[Scorer]) -> int:
    """Score the run's finished results against the `expected` column (a run without
    one: nothing); the rows stored. A failure is logged: the results stand without."""
    if expected is None:
        return 0
    try:
        return _score(store, run_id, expected, scorers)
    except Exception:  # noqa: BLE001 - scores are derived; the run's results are what counts
        log.exception("run %s: scoring failed", run_id)
        return 0


def _score(store: Store, run_id: str, expected: str, scorers: Sequence[Scorer]) -> int:
    scores = ScoreStore(store)
    scores.clear(run_id)
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
