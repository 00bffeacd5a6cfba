"""Semantic drift in DuckDB: the renderings a drift check reads, and what it found.

A rendering is a (variant, dataset row) of a run: its repeats render the same prompt,
so drift is kept once per rendering, and rates count renderings (the rows: a run's
units), never requests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from promptlab.store.connection import Store


@dataclass(frozen=True)
class Rendering:
    """One variant's prompt for one dataset row: what a drift check embeds."""

    variant_index: int
    row_index: int
    values: dict[str, Any]


@dataclass(frozen=True)
class DriftRow:
    """What a drift check found for one rendering."""

    variant_index: int
    row_index: int
    distance: float
    drifted: bool
    #: The distance past which it drifted: the check's, or its version's own.
    threshold: float


@dataclass(frozen=True)
class RenderingDrift:
    """A rendering's drift as the last check found it, with how it was measured."""

    distance: float
    drifted: bool
    threshold: float
    embedder: str


class DriftStore:
    """Reads and writes of the `item_drift` table."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def renderings(self, run_id: str) -> list[Rendering]:
        """Every (variant, row) the run planned, with the row's values, in plan order."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT i.variant_index, i.row_index, any_value(r.row_values) FROM items i "
                "JOIN run_rows r ON r.run_id = i.run_id AND r.row_index = i.row_index "
                "WHERE i.run_id = ? GROUP BY i.variant_index, i.row_index "
                "ORDER BY i.row_index, i.variant_index",
                [run_id],
            ).fetchall()
        return [Rendering(int(v), int(r), json.loads(values)) for v, r, values in rows]

    def save(
        self,
        run_id: str,
        rows: Sequence[DriftRow],
        *,
        embedder: str,
        at: datetime,
    ) -> None:
        """Replace the run's drift with `rows` (a check made again supersedes the last)."""
        with self.store.transaction() as tx:
            tx.execute("DELETE FROM item_drift WHERE run_id = ?", [run_id])
            tx.register(
                "d_rows",
                {
                    "variant_index": np.array([r.variant_index for r in rows], np.int32),
                    "row_index": np.array([r.row_index for r in rows], np.int64),
                    "distance": np.array([r.distance for r in rows], np.float64),
                    "drifted": np.array([r.drifted for r in rows], np.bool_),
                    "threshold": np.array([r.threshold for r in rows], np.float64),
                },
            )
            tx.execute(
                "INSERT INTO item_drift (run_id, variant_index, row_index, distance, drifted, "
                "threshold, embedder, checked_at) SELECT ?, variant_index, row_index, distance, "
                "drifted, threshold, ?, ? FROM d_rows",
                [run_id, embedder, at],
            )

    def found(self, run_id: str) -> list[DriftRow]:
        """The run's last drift check, by row and variant (empty when none was made)."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT variant_index, row_index, distance, drifted, threshold FROM item_drift "
                "WHERE run_id = ? ORDER BY row_index, variant_index",
                [run_id],
            ).fetchall()
        return [DriftRow(int(v), int(r), float(d), bool(x), float(t)) for v, r, d, x, t in rows]

    def rendering(self, run_id: str, variant_index: int, row_index: int) -> RenderingDrift | None:
        """One rendering's drift from the run's last check; None when none covered it."""
        with self.store.read() as cur:
            row = cur.execute(
                "SELECT distance, drifted, threshold, embedder FROM item_drift "
                "WHERE run_id = ? AND variant_index = ? AND row_index = ?",
                [run_id, variant_index, row_index],
            ).fetchone()
        return (
            None
            if row is None
            else RenderingDrift(float(row[0]), bool(row[1]), float(row[2]), str(row[3]))
        )
