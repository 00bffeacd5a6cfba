"""Runs in DuckDB: their lifecycle (create, move status, read back), events and variants.

Items of a run (planning, the writer, reopen and cancel) are in `promptlab.store.items`;
what the pages and the CLI read about runs is in `promptlab.store.read_models`.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from promptlab.audit.redact import Redactor
from promptlab.errors import EngineError, RunNotFoundError
from promptlab.records import FINAL_RUN_STATUSES, RunRecord, RunStatus, VariantRecord
from promptlab.records.states import run_sources
from promptlab.store.connection import Store

RUN_COLUMNS = (
    "run_id, name, spec, status, status_reason, total_items, submitted_at, scheduled_at, "
    "started_at, finished_at, updated_at, owner"
)
#: Statuses whose run is then driven by the process that set them: it becomes the owner.
_OWNING = (RunStatus.SUBMITTED, RunStatus.WAITING, RunStatus.SCHEDULED, RunStatus.RUNNING)
_OWNER: tuple[int, str] | None = None
#: Statuses no process drives: final ones, and a pause (until `resume`).
_UNDRIVEN = FINAL_RUN_STATUSES | {RunStatus.PAUSED}


def process_owner() -> str:
    """This process, as a run's owner: host, pid and a token (a pid can be reused)."""
    global _OWNER
    pid = os.getpid()
    if _OWNER is None or _OWNER[0] != pid:  # a forked child is another owner
        _OWNER = (pid, f"{socket.gethostname()}:{pid}:{secrets.token_hex(4)}")
    return _OWNER[1]


@dataclass(frozen=True)
class Dependency:
    """One run a run comes after (`after:`): its name, id and state now."""

    name: str
    run_id: str
    status: RunStatus
    reason: str | None


_STATUS_TIMESTAMP = {
    RunStatus.SCHEDULED: "scheduled_at",
    RunStatus.RUNNING: "started_at",
    RunStatus.COMPLETED: "finished_at",
    RunStatus.FAILED: "finished_at",
    RunStatus.CANCELLED: "finished_at",
}


class RunStore:
    """Writes and reads of the `runs`, `run_events` and `run_variants` tables."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def create_run(
        self,
        run_id: str,
        name: str,
        spec: Mapping[str, Any],
        variants: Sequence[VariantRecord],
        after: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Record a new run, its variants and what it comes after ((name, run id) pairs)."""
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            tx.execute(
                f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?, ?, ?, ?, NULL, 0, ?, NULL, NULL, "
                "NULL, ?, ?)",
                [run_id, name, json.dumps(spec), RunStatus.SUBMITTED, now, now, process_owner()],
            )
            tx.executemany(
                "INSERT INTO run_variants VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [
                        run_id,
                        v.index,
                        v.name,
                        v.prompt_ref,
                        v.prompt_version_id,
                        v.endpoint,
                        v.model,
                        json.dumps(dict(v.params)),
                        json.dumps(dict(v.template)),
                    ]
                    for v in variants
                ],
            )
            if after:
                tx.executemany(
                    "INSERT INTO run_dependencies VALUES (?, ?, ?)",
                    [[run_id, name, depends_on] for name, depends_on in after],
                )
            _add_event(tx, run_id, RunStatus.SUBMITTED, None, now)

    def newest_named(self, name: str) -> RunRecord | None:
        """The newest run called `name`, which `after: [name]` comes after."""
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE name = ? "
                "ORDER BY submitted_at DESC, run_id DESC LIMIT 1",
                [name],
            ).fetchone()
        return None if row is None else run_from_row(row)

    def dependencies(self, run_id: str) -> list[Dependency]:
        """What the run comes after, in name order, each with its run's state now."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT d.name, d.depends_on, r.status, r.status_reason "
                "FROM run_dependencies d LEFT JOIN runs r ON r.run_id = d.depends_on "
                "WHERE d.run_id = ? ORDER BY d.name",
                [run_id],
            ).fetchall()
        return [Dependency(r[0], r[1], RunStatus(r[2] or RunStatus.FAILED), r[3]) for r in rows]

    def waiting(self) -> list[str]:
        """Ids of every run waiting for the runs it comes after, oldest first."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT run_id FROM runs WHERE status = ? ORDER BY submitted_at",
                [RunStatus.WAITING],
            ).fetchall()
        return [r[0] for r in rows]

    def set_status(self, run_id: str, status: RunStatus, reason: str | None = None) -> None:
        """Move the run to `status`, stamping its timestamp and recording the event: a
        compare-and-set along RUN_TRANSITIONS (the state it leaves is checked in the same
        statement), so a move the lifecycle does not allow, or one that lost a race to
        another, is refused (EngineError) and changes nothing."""
        now = self.store.clock.now()
        reason = Redactor.from_environ().optional(reason)
        column = _STATUS_TIMESTAMP.get(status)
        stamp = f", {column} = ?" if column else ""
        if column == "started_at":
            # The first start stays: a resumed run's wall time covers all of it (the
            # resume's own start is its last `running` event).
            stamp = ", started_at = coalesce(started_at, ?)"
        # A resumed run starts again: its old finish time no longer applies.
        clear = ", finished_at = NULL" if status in (RunStatus.SCHEDULED, RunStatus.RUNNING) else ""
        owning = status in _OWNING
        own = ", owner = ?" if owning else ""
        sources = run_sources(status)
        with self.store.transaction() as tx:
            moved = tx.execute(
                f"UPDATE runs SET status = ?, status_reason = ?, updated_at = ?{stamp}{clear}"
                f"{own} WHERE run_id = ? AND status IN ({', '.join('?' * len(sources))}) "
                "RETURNING run_id",
                [
                    status,
                    reason,
                    now,
                    *([now] if column else []),
                    *([process_owner()] if owning else []),
                    run_id,
                    *sources,
                ],
            ).fetchall()
            if not moved:
                found = tx.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
                if found is None:
                    raise RunNotFoundError(f"no run {run_id!r}")
                raise EngineError(f"run {run_id} is {found[0]}: it cannot become {status}")
            _add_event(tx, run_id, status, reason, now)

    def get_run(self, run_id: str) -> RunRecord:
        with self.store.read() as cur:
            return fetch_run(cur, run_id)

    def list_runs(self, limit: int = 100) -> list[RunRecord]:
        """The newest `limit` runs, newest first."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {RUN_COLUMNS} FROM runs ORDER BY submitted_at DESC LIMIT ?", [limit]
            ).fetchall()
        return [run_from_row(r) for r in rows]

    def events(self, run_id: str) -> list[tuple[RunStatus, str | None, datetime]]:
        """Every status change of the run, oldest first: (status, reason, when)."""
        with self.store.read() as cur:
            return fetch_events(cur, run_id)

    def variants(self, run_id: str) -> list[VariantRecord]:
        with self.store.read() as cur:
            return fetch_variants(cur, run_id)


def fetch_run(cur: Any, run_id: str) -> RunRecord:
    """The run's record, read on `cur` (a plain read or a snapshot)."""
    row = cur.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        raise RunNotFoundError(f"no run with id {run_id!r}")
    return run_from_row(row)


def fetch_variants(cur: Any, run_id: str, index: int | None = None) -> list[VariantRecord]:
    """The run's variants in order (or only the one at `index`), read on `cur`."""
    only = "" if index is None else " AND variant_index = ?"
    rows = cur.execute(
        "SELECT variant_index, name, prompt_ref, prompt_version_id, endpoint, model, "
        f"params, template FROM run_variants WHERE run_id = ?{only} ORDER BY variant_index",
        [run_id] if index is None else [run_id, index],
    ).fetchall()
    return [
        VariantRecord(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), json.loads(r[7]))
        for r in rows
    ]


def fetch_events(cur: Any, run_id: str) -> list[tuple[RunStatus, str | None, datetime]]:
    """The run's status changes, oldest first, read on `cur`."""
    rows = cur.execute(
        "SELECT status, reason, changed_at FROM run_events WHERE run_id = ? ORDER BY seq",
        [run_id],
    ).fetchall()
    return [(RunStatus(r[0]), r[1], r[2]) for r in rows]


def run_from_row(row: tuple[Any, ...]) -> RunRecord:
    """A RunRecord from the RUN_COLUMNS of one `runs` row (read models use it too)."""
    return RunRecord(
        run_id=row[0],
        name=row[1],
        spec=json.loads(row[2]),
        status=RunStatus(row[3]),
        status_reason=row[4],
        total_items=int(row[5]),
        submitted_at=row[6],
        scheduled_at=row[7],
        started_at=row[8],
        finished_at=row[9],
        updated_at=row[10],
        owner=row[11],
        # A live run's owner is the process driving it; only one process has the file,
        # so an owner other than this one is a process that is gone. A paused run is
        # driven by nobody on purpose.
        process_gone=RunStatus(row[3]) not in _UNDRIVEN and row[11] != process_owner(),
    )


def _add_event(
    tx: duckdb.DuckDBPyConnection,
    run_id: str,
    status: RunStatus,
    reason: str | None,
    at: datetime,
) -> None:
    tx.execute(
        "INSERT INTO run_events SELECT ?, coalesce(max(seq), 0) + 1, ?, ?, ? "
        "FROM run_events WHERE run_id = ?",
        [run_id, status, reason, at, run_id],
    )
