"""Schedules in DuckDB: add or replace, pause, resume, remove, and what falls due."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from promptlab.errors import ScheduleNotFoundError
from promptlab.records import ScheduleRecord
from promptlab.store.connection import Store

COLUMNS = (
    "name, cron, spec, paused, next_at, last_at, last_run_id, last_error, author, created_at, "
    "updated_at"
)
#: Schedules as read: every column, and the status of the last run each submitted.
_READ = (
    "SELECT " + ", ".join(f"s.{c.strip()}" for c in COLUMNS.split(",")) + ", r.status "
    "FROM schedules s LEFT JOIN runs r ON r.run_id = s.last_run_id"
)


class ScheduleStore:
    """Reads and writes of the `schedules` table."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def put(
        self, name: str, cron: str, spec: Mapping[str, Any], author: str, next_at: datetime
    ) -> bool:
        """Add the schedule, or replace its cron and spec (it is then active again);
        True when it is new. Its last firing is kept."""
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            found = tx.execute("SELECT 1 FROM schedules WHERE name = ?", [name]).fetchone()
            if found is None:
                tx.execute(
                    f"INSERT INTO schedules ({COLUMNS}) "
                    "VALUES (?, ?, ?, false, ?, NULL, NULL, NULL, ?, ?, ?)",
                    [name, cron, json.dumps(dict(spec)), next_at, author, now, now],
                )
            else:
                tx.execute(
                    "UPDATE schedules SET cron = ?, spec = ?, paused = false, next_at = ?, "
                    "author = ?, updated_at = ? WHERE name = ?",
                    [cron, json.dumps(dict(spec)), next_at, author, now, name],
                )
        return found is None

    def get(self, name: str) -> ScheduleRecord:
        with self.store.read() as cur:
            row = cur.execute(f"{_READ} WHERE s.name = ?", [name]).fetchone()
        if row is None:
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
        return _record(row)

    def all(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        with self.store.read() as cur:
            rows = cur.execute(f"{_READ} ORDER BY s.name").fetchall()
        return [_record(r) for r in rows]

    def set_paused(self, name: str, paused: bool, next_at: datetime | None) -> None:
        self._update(name, "paused = ?, next_at = ?", [paused, next_at])

    def fired(
        self, name: str, at: datetime, run_id: str | None, error: str | None, next_at: datetime
    ) -> None:
        """Record a firing (the run it submitted, or why none) and the next time."""
        self._update(
            name,
            "last_at = ?, last_run_id = coalesce(?, last_run_id), last_error = ?, next_at = ?",
            [at, run_id, error, next_at],
        )

    def remove(self, name: str) -> None:
        self.get(name)
        with self.store.transaction() as tx:
            tx.execute("DELETE FROM schedules WHERE name = ?", [name])

    def due(self, now: datetime) -> list[ScheduleRecord]:
        """Active schedules whose time has come, the longest overdue first."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"{_READ} WHERE NOT s.paused AND s.next_at <= ? ORDER BY s.next_at, s.name",
                [now],
            ).fetchall()
        return [_record(r) for r in rows]

    def next_due(self) -> datetime | None:
        """When the next active schedule falls due (None: none is active)."""
        with self.store.read() as cur:
            row = cur.execute("SELECT min(next_at) FROM schedules WHERE NOT paused").fetchone()
        return row[0] if row else None

    def _update(self, name: str, assignments: str, values: list[Any]) -> None:
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            found = tx.execute(
                f"UPDATE schedules SET {assignments}, updated_at = ? WHERE name = ? RETURNING 1",
                [*values, now, name],
            ).fetchone()
        if found is None:
            raise ScheduleNotFoundError(f"no schedule named {name!r}")


def _record(row: tuple[Any, ...]) -> ScheduleRecord:
    return ScheduleRecord(
        name=row[0],
        cron=row[1],
        spec=json.loads(row[2]),
        paused=bool(row[3]),
        next_at=row[4],
        last_at=row[5],
        last_run_id=row[6],
        last_error=row[7],
        author=row[8],
        created_at=row[9],
        updated_at=row[10],
        last_status=row[11],
    )
