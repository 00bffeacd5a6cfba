"""A cross-check's tiebreak round: once its models answered every row, the rows they
doubt go to its tiebreak model in the same run (promptlab/evaluation/tiebreak.py).

The engine calls `plan_tiebreaks` when a run's items are all answered and it was not
halted: the rows not yet measured are measured, and each doubted row gets one item for
the tiebreak variant, stored with its measure in one transaction. The run then sends
those items like any other, and ends. A resumed run measures only the rows it had not:
a kill between two batches loses no measure and plans no item twice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from promptlab.engine.plan.planner import idempotency_key
from promptlab.engine.plan.prepare import PreparedRun
from promptlab.evaluation.crossruns import measure_rows
from promptlab.providers.config import EndpointConfig
from promptlab.providers.embeddings import Embedder
from promptlab.store.connection import Store
from promptlab.store.crosscheck import CrosscheckStore


def plan_tiebreaks(
    store: Store, run_id: str, prepared: PreparedRun, endpoints: Mapping[str, EndpointConfig]
) -> int:
    """Measure the run's unmeasured rows and plan their tiebreaks; the items added
    (0 for a run without a tiebreak, and for a validation run: it only weighs models)."""
    spec = prepared.spec
    check = spec.crosscheck
    if check is None or check.tiebreak is None or spec.validating is not None:
        return 0
    tiebreak = check.tiebreak
    (variant,) = [v for v in prepared.variants if v.name == tiebreak.model]
    embedder = Embedder.of(tiebreak.embeddings, endpoints, os.environ)
    crosschecks, added = CrosscheckStore(store), 0
    for rows in measure_rows(store, run_id, check, embedder.embed):
        items = [
            (idempotency_key(run_id, r.row_index, variant.name, 0), r.row_index, variant.index)
            for r in rows
            if r.reinfer
        ]
        measured = [(r.row_index, r.agreement, r.divergence, r.reinfer) for r in rows]
        crosschecks.add_round(run_id, measured, items, embedder.source, store.clock.now())
        added += len(items)
    return added
