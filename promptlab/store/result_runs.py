"""Which runs have results: what the Compare page offers, and whether it is the first page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from promptlab.store.connection import Store


@dataclass(frozen=True)
class RunWithResults:
    """A run that has finished results, with its variants in variant order."""

    run_id: str
    name: str
    submitted_at: datetime
    variants: list[str]
    results: int


class ResultRuns:
    """Reads over `results` grouped by run; each call reads on its own."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def has_results(self) -> bool:
        """True once any run has stored a result (a cheap probe, not a count)."""
        with self.store.read() as cur:
            row = cur.execute("SELECT EXISTS (SELECT 1 FROM results LIMIT 1)").fetchone()
        return bool(row and row[0])

    def runs_with_results(
        self, limit: int = 50, include: str | None = None
    ) -> list[RunWithResults]:
        """The newest `limit` runs with results, newest first; `include` names a run listed
        too however old it is (a link to it), when it has results."""
        with self.store.read() as cur:
            rows = cur.execute(
                "WITH counts AS (SELECT run_id, count(*) AS n FROM results GROUP BY run_id), "
                "names AS (SELECT run_id, list(name ORDER BY variant_index) AS variants "
                "FROM run_variants GROUP BY run_id), "
                "newest AS (SELECT run_id FROM runs JOIN counts USING (run_id) "
                "ORDER BY submitted_at DESC, run_id LIMIT ?) "
                "SELECT r.run_id, r.name, r.submitted_at, coalesce(v.variants, []), c.n "
                "FROM runs r JOIN counts c USING (run_id) LEFT JOIN names v USING (run_id) "
                "WHERE r.run_id IN (SELECT run_id FROM newest) OR r.run_id = ? "
                "ORDER BY r.submitted_at DESC, r.run_id",
                [limit, include],
            ).fetchall()
        return [RunWithResults(r[0], r[1], r[2], list(r[3]), int(r[4])) for r in rows]
