"""Decisions taken on production logs: the final look at two versions, stored once.

`log_decisions` (migration 0026_log_decisions) holds one row per ordered pair of
versions: who decided and when, the planned units, the method, and the final look's
rows as JSON (what the Compare page shows instead of the live view afterwards). The
pair is the key, so a second decision of the same pair inserts nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from promptlab.store.connection import Store

__all__ = ["LogDecision", "LogDecisions"]


@dataclass(frozen=True)
class LogDecision:
    version_a: str
    version_b: str
    #: The versions as people read them (`name@1.2.0`).
    label_a: str
    label_b: str
    decided_at: datetime
    decided_by: str
    planned_units: int
    since: datetime | None
    method: str
    #: Units per arm when it was decided (control first).
    units_a: int
    units_b: int
    #: How many tests Holm adjusted over (the page says it above the table).
    family_size: int
    #: The final look's rows: metric, values, effect, interval, p, adjusted p, verdict.
    rows: tuple[dict[str, Any], ...]


_COLUMNS = (
    "version_a, version_b, label_a, label_b, decided_at, decided_by, planned_units, "
    "since, method, units_a, units_b, family_size, rows"
)


class LogDecisions:
    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, version_a: str, version_b: str) -> LogDecision | None:
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_COLUMNS} FROM log_decisions WHERE version_a = ? AND version_b = ?",
                [version_a, version_b],
            ).fetchone()
        if row is None:
            return None
        fields: dict[str, Any] = dict(zip(_COLUMNS.split(", "), row, strict=True))
        fields["rows"] = tuple(json.loads(fields["rows"]))
        return LogDecision(**fields)

    def insert(self, decision: LogDecision) -> bool:
        """Store the decision; False when the pair was decided already (nothing changes)."""
        values = [
            decision.version_a,
            decision.version_b,
            decision.label_a,
            decision.label_b,
            decision.decided_at,
            decision.decided_by,
            decision.planned_units,
            decision.since,
            decision.method,
            decision.units_a,
            decision.units_b,
            decision.family_size,
            json.dumps(list(decision.rows)),
        ]
        with self.store.transaction() as tx:
            inserted = tx.execute(
                f"INSERT INTO log_decisions ({_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1",
                values,
            ).fetchall()
        return bool(inserted)
