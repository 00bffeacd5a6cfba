"""The `after_run` table: each run's after-run work, keyed by (run, work)."""

from __future__ import annotations

from promptlab.records.afterrun import AfterRunRecord, AfterRunState
from promptlab.store.connection import Store

_COLUMNS = "run_id, work, state, detail, child_run_id, updated_at"


class AfterRunStore:
    """Writes and reads of the `after_run` table."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def record(
        self,
        run_id: str,
        work: str,
        state: str,
        detail: str | None = None,
        child_run_id: str | None = None,
    ) -> None:
        """The work's state now (its started run kept when `child_run_id` is None)."""
        with self.store.transaction() as tx:
            tx.execute(
                "INSERT INTO after_run (run_id, work, state, detail, child_run_id, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, work) DO UPDATE SET "
                "state = excluded.state, detail = excluded.detail, "
                "child_run_id = coalesce(excluded.child_run_id, after_run.child_run_id), "
                "updated_at = excluded.updated_at",
                [run_id, work, state, detail, child_run_id, self.store.clock.now()],
            )

    def claim(self, run_id: str, work: str) -> bool:
        """Claim the work that starts a run of its own: False when a run was started for
        it already. A claim whose run never started (the process died between the two)
        is taken again: the run that claimed it is the same run, ending again."""
        with self.store.transaction() as tx:
            found = tx.execute(
                "SELECT child_run_id FROM after_run WHERE run_id = ? AND work = ?",
                [run_id, work],
            ).fetchone()
            if found is not None and found[0] is not None:
                return False
            tx.execute(
                "INSERT INTO after_run (run_id, work, state, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id, work) DO UPDATE SET state = excluded.state, "
                "detail = NULL, updated_at = excluded.updated_at",
                [run_id, work, AfterRunState.STARTING.value, self.store.clock.now()],
            )
        return True

    def started(self, run_id: str, work: str, child_run_id: str) -> None:
        """The claimed work's run started: `running`, unless that run has already ended
        and said how (a small judge run can end before its submit returns here)."""
        with self.store.transaction() as tx:
            tx.execute(
                "UPDATE after_run SET child_run_id = ?, updated_at = ?, state = CASE WHEN "
                "state = ? THEN ? ELSE state END WHERE run_id = ? AND work = ?",
                [
                    child_run_id,
                    self.store.clock.now(),
                    AfterRunState.STARTING.value,
                    AfterRunState.RUNNING.value,
                    run_id,
                    work,
                ],
            )

    def get(self, run_id: str, work: str) -> AfterRunRecord | None:
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_COLUMNS} FROM after_run WHERE run_id = ? AND work = ?", [run_id, work]
            ).fetchone()
        return AfterRunRecord(*row) if row else None

    def for_run(self, run_id: str) -> list[AfterRunRecord]:
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM after_run WHERE run_id = ? ORDER BY work", [run_id]
            ).fetchall()
        return [AfterRunRecord(*row) for row in rows]

    def failed(self, run_id: str | None = None, limit: int = 50) -> list[AfterRunRecord]:
        """Failed work (of one run, or the latest of every run)."""
        where, args = "state = ?", [AfterRunState.FAILED.value]
        if run_id is not None:
            where, args = where + " AND run_id = ?", [*args, run_id]
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM after_run WHERE {where} "
                "ORDER BY updated_at DESC, run_id, work LIMIT ?",
                [*args, limit],
            ).fetchall()
        return [AfterRunRecord(*row) for row in rows]
