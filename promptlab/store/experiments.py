"""Experiments, their revisions, exposures and run assignments in DuckDB: every SQL statement.

The rules (file format, allocation, what a revision may change, which exposures are
valid) stay in `promptlab.experiments` and the workbench; this module reads and writes
rows. A revision's config is kept as the exported JSON (`config_json`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from promptlab.errors import StaleChangeError, moment
from promptlab.experiments import Exposure
from promptlab.store.connection import Store

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_REVISION_COLUMNS = "name, revision, config, author, created_at, note"


@dataclass(frozen=True)
class StoredRevision:
    name: str
    revision: int
    #: The exported config (`ExperimentConfig.to_dict()`), parsed from JSON.
    config: dict[str, Any]
    author: str
    created_at: datetime
    note: str


@dataclass(frozen=True)
class AssignmentCount:
    """Dataset rows of runs a split assigned to one variant of one revision."""

    experiment: str
    revision: int
    variant: str
    in_experiment: bool
    rows: int


class ExperimentStore:
    """Reads and writes of `experiments`, `experiment_revisions`, `exposures`, `assignments`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- revisions -----------------------------------------------------------------

    def add_revision(
        self,
        name: str,
        revision: int,
        salt: str,
        config_json: str,
        *,
        author: str,
        created_at: datetime,
        note: str,
    ) -> None:
        """Store revision `revision` of `name` (1 creates the experiment with its salt).

        Refused when another writer added a revision since the caller read the latest.
        """
        with self.store.transaction() as tx:
            row = tx.execute(
                "SELECT revision, author, created_at FROM experiment_revisions WHERE name = ? "
                "ORDER BY revision DESC LIMIT 1",
                [name],
            ).fetchone()
            latest = int(row[0]) if row else 0
            if latest != revision - 1:
                by, at = (row[1], row[2]) if row else (None, None)
                raise StaleChangeError(
                    f"experiment {name!r} changed meanwhile (now at revision {latest}, made by "
                    f"{by} at {moment(at)}); look at it again and retry",
                    changed_by=by,
                    changed_at=at,
                )
            if revision == 1:
                tx.execute(
                    "INSERT INTO experiments VALUES (?, ?, ?, ?)", [name, salt, created_at, author]
                )
            tx.execute(
                "INSERT INTO experiment_revisions VALUES (?, ?, ?, ?, ?, ?)",
                [name, revision, config_json, author, created_at, note],
            )

    def salt(self, name: str) -> str | None:
        with self.store.read() as cur:
            row = cur.execute("SELECT salt FROM experiments WHERE name = ?", [name]).fetchone()
        return None if row is None else str(row[0])

    def latest(self, name: str) -> StoredRevision | None:
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_REVISION_COLUMNS} FROM experiment_revisions WHERE name = ? "
                "ORDER BY revision DESC LIMIT 1",
                [name],
            ).fetchone()
        return None if row is None else _revision(row)

    def revision(self, name: str, revision: int) -> StoredRevision | None:
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_REVISION_COLUMNS} FROM experiment_revisions "
                "WHERE name = ? AND revision = ?",
                [name, revision],
            ).fetchone()
        return None if row is None else _revision(row)

    def revisions(self, name: str) -> list[StoredRevision]:
        """Every revision of `name`, newest first."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_REVISION_COLUMNS} FROM experiment_revisions WHERE name = ? "
                "ORDER BY revision DESC",
                [name],
            ).fetchall()
        return [_revision(r) for r in rows]

    def latest_revisions(self) -> list[StoredRevision]:
        """The latest revision of every experiment, by name."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_REVISION_COLUMNS} FROM experiment_revisions "
                "QUALIFY row_number() OVER (PARTITION BY name ORDER BY revision DESC) = 1 "
                "ORDER BY name"
            ).fetchall()
        return [_revision(r) for r in rows]

    # ---- exposures -----------------------------------------------------------------

    def add_exposures(
        self, batches: Iterable[Sequence[Exposure]], *, source: str, imported_at: datetime
    ) -> int:
        """Store every batch in ONE transaction; return how many exposures were new.

        `batches` may raise while it is consumed (a bad line): then nothing is stored.
        An exposure already stored (same experiment, revision, unit, variant and time)
        is not stored again, so importing a log twice changes nothing.
        """
        added = 0
        with self.store.transaction() as tx:
            for batch in batches:
                if not batch:
                    continue
                tx.register("x_exposures", _exposure_table(batch))
                try:
                    row = tx.execute(
                        "INSERT INTO exposures SELECT DISTINCT e.experiment, e.revision, "
                        "e.unit_id, e.variant, e.bucket, e.prompt_version_id, ?, e.exposed_at, ? "
                        "FROM (SELECT *, make_timestamp(exposed_us) AT TIME ZONE 'UTC' "
                        "AS exposed_at FROM x_exposures) e WHERE NOT EXISTS (SELECT 1 FROM "
                        "exposures o WHERE o.experiment = e.experiment AND o.revision = "
                        "e.revision AND o.unit_id = e.unit_id AND o.variant = e.variant AND "
                        "o.exposed_at = e.exposed_at)",
                        [source, imported_at],
                    ).fetchone()
                finally:
                    tx.unregister("x_exposures")
                added += int(row[0]) if row else 0
        return added

    def exposure_counts(self, name: str) -> dict[tuple[int, str], int]:
        """Distinct units exposed per (revision, variant) of experiment `name`."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT revision, variant, count(DISTINCT unit_id) FROM exposures "
                "WHERE experiment = ? GROUP BY ALL ORDER BY ALL",
                [name],
            ).fetchall()
        return {(int(r[0]), str(r[1])): int(r[2]) for r in rows}

    # ---- run assignments -----------------------------------------------------------

    def assignment_counts(
        self, *, experiment: str | None = None, run_id: str | None = None
    ) -> list[AssignmentCount]:
        """Rows per (experiment, revision, variant, in experiment), of one run or all."""
        where, params = [], []
        if experiment is not None:
            where.append("experiment = ?")
            params.append(experiment)
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT experiment, revision, variant, in_experiment, count(*) FROM assignments "
                + clause
                + "GROUP BY ALL ORDER BY ALL",
                params,
            ).fetchall()
        return [AssignmentCount(r[0], int(r[1]), r[2], bool(r[3]), int(r[4])) for r in rows]


def _revision(row: Any) -> StoredRevision:
    return StoredRevision(row[0], int(row[1]), json.loads(row[2]), row[3], row[4], row[5])


def _exposure_table(batch: Sequence[Exposure]) -> dict[str, Any]:
    one_us = timedelta(microseconds=1)
    n = len(batch)
    return {
        "experiment": _text_column(e.experiment for e in batch),
        "revision": np.fromiter((e.revision for e in batch), np.int32, n),
        "unit_id": _text_column(e.unit for e in batch),
        "variant": _text_column(e.variant for e in batch),
        "bucket": np.fromiter((e.bucket for e in batch), np.int32, n),
        "prompt_version_id": _text_column(e.prompt_version_id for e in batch),
        # Epoch microseconds, made a UTC timestamp in SQL: a NumPy datetime64 column would
        # be read as local time by DuckDB's session time zone.
        "exposed_us": np.fromiter(((e.time - _EPOCH) // one_us for e in batch), np.int64, n),
    }


def _text_column(values: Iterable[str]) -> np.ndarray[Any, np.dtype[np.object_]]:
    """Python strings as a NumPy object array, which DuckDB reads as VARCHAR."""
    return np.array(list(values), dtype=object)
