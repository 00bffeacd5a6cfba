"""`wb.drift`: semantic drift of a run's filled prompts from their versions' typical
prompt (promptlab/evaluation/drift.py), checked and kept per rendering."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from promptlab.facades.context import Context
from promptlab.store.drift import DriftStore, RenderingDrift
from promptlab.store.runs import RunStore

if TYPE_CHECKING:
    from promptlab.evaluation.drift import VersionDrift

__all__ = ["Drift", "RenderingDrift"]


class Drift:
    """Check a run's drift with an embeddings endpoint; read what the last check found."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._rows = DriftStore(context.store)
        self._runs = RunStore(context.store)

    def check(
        self,
        run_id: str,
        model: str,
        threshold: float | None = None,
        reference: str | None = None,
    ) -> list[VersionDrift]:
        """Embed each of the run's renderings with `model` (ENDPOINT:MODEL of the
        providers file), keep each one's distance and whether it drifted past
        `threshold` (None: each version's own `drift_threshold`, else evaluation/drift.py's
        DEFAULT_THRESHOLD) from its
        version's typical prompt (or the centroid of the `reference` dataset's), replacing
        an earlier check, and return each variant's drift rate. Recorded in the audit."""
        # Imported here: the check brings templates and embeddings, which a batch never needs.
        from promptlab.evaluation.drift import check_run
        from promptlab.providers.config import load_endpoints
        from promptlab.providers.embeddings import Embedder

        endpoints = load_endpoints(self._context.settings.providers_file)
        embedder = Embedder.of(model, endpoints, os.environ)
        found = check_run(self._context.store, run_id, embedder, threshold, reference)
        self._context.audit_change(
            "drift.checked",
            self._context.author(),
            {
                "embedder": embedder.source,
                "threshold": threshold,  # None: each version's own (`thresholds`)
                "thresholds": {v.variant: v.threshold for v in found},
                "reference": reference,
                "drifted": {v.variant: [v.drifted, v.renderings] for v in found},
            },
            run_id=run_id,
        )
        return found

    def found(self, run_id: str) -> list[VersionDrift]:
        """Each variant's drift rate from the run's last check (no renderings: none made)."""
        from promptlab.evaluation.drift import drift_by_version

        return drift_by_version(self._runs.variants(run_id), self._rows.found(run_id))

    def rendering(self, run_id: str, variant_index: int, row_index: int) -> RenderingDrift | None:
        """One rendering's (an item's variant and row) drift from the run's last check."""
        return self._rows.rendering(run_id, variant_index, row_index)
