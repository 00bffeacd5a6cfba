"""The engine's one writer: buffers dispatch marks, attempts and results, commits in batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

from promptlab.store.runs import AttemptRow, FinalRow, RunStore, WriteBatch

log = logging.getLogger(__name__)

#: error_kind of an item whose result the store refused (see `_write_row_by_row`).
STORE_ERROR_KIND = "store_error"

#: Commit at least this often, so a crash loses at most this much of finished work.
FLUSH_INTERVAL_S = 0.2
#: Commit early when this many rows wait: hundreds per transaction keeps DuckDB fast.
FLUSH_ROWS = 2_000
#: Seconds between attempts after a failed commit (the batch is kept and retried).
RETRY_FLUSH_S = 1.0
#: Failed commits in a row after which the batch is written row by row, so one row the
#: store cannot take (it would fail every time) is set aside instead of stalling all runs.
MAX_BATCH_FAILURES = 3


class BatchWriter:
    """Collects writes from every run on the engine loop; one flush commits at a time."""

    def __init__(self, runs: RunStore, interval_s: float = FLUSH_INTERVAL_S) -> None:
        self._runs = runs
        self._interval_s = interval_s
        self._batch = WriteBatch()
        self._lock = asyncio.Lock()
        self._full = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.committed_rows = 0
        self.last_error: str | None = None
        self._failures = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="batch-writer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()

    def dispatched(self, key: str) -> None:
        self._batch.dispatched.append(key)
        self._check_full()

    def attempt(self, row: AttemptRow) -> None:
        self._batch.attempts.append(row)
        self._check_full()

    def final(self, row: FinalRow) -> None:
        self._batch.finals.append(row)
        self._check_full()

    def _check_full(self) -> None:
        if len(self._batch) >= FLUSH_ROWS:
            self._full.set()

    async def flush(self) -> None:
        """Commit everything buffered so far; retries until it is stored.

        After MAX_BATCH_FAILURES failed commits in a row the batch goes row by row, so
        this returns even when one row can never be stored (it is set aside).
        """
        while True:
            try:
                await self._flush_once()
                return
            except Exception:  # noqa: BLE001 - logged in _flush_once; the rows are kept
                await asyncio.sleep(RETRY_FLUSH_S)

    async def _flush_once(self) -> None:
        async with self._lock:
            batch, self._batch = self._batch, WriteBatch()
            self._full.clear()
            if not len(batch):
                return
            if self._failures >= MAX_BATCH_FAILURES:
                await asyncio.to_thread(self._write_row_by_row, batch)
                self._failures = 0
                return
            try:
                await asyncio.to_thread(self._runs.write_batch, batch)
            except Exception as exc:
                # Keep the rows: they go out with the next try. Nothing is dropped.
                self._failures += 1
                self.last_error = str(exc)
                log.exception("batch write failed; will retry")
                self._batch.dispatched[:0] = batch.dispatched
                self._batch.attempts[:0] = batch.attempts
                self._batch.finals[:0] = batch.finals
                raise
            self._failures = 0
            self.committed_rows += len(batch)
            self.last_error = None

    def _write_row_by_row(self, batch: WriteBatch) -> None:
        """Commit each row alone; a final row the store refuses is kept as a failure."""
        for key in batch.dispatched:
            self._write_alone(WriteBatch(dispatched=[key]))
        for attempt in batch.attempts:
            self._write_alone(WriteBatch(attempts=[attempt]))
        for final in batch.finals:
            error = self._write_alone(WriteBatch(finals=[final]))
            if error is not None:
                # The item still gets its one final row, without what could not be stored.
                stored = replace(
                    final,
                    status="failed",
                    error_kind=STORE_ERROR_KIND,
                    error_message=f"the result could not be stored: {error}"[:500],
                    output_text=None,
                    params={},
                )
                self._write_alone(WriteBatch(finals=[stored]))

    def _write_alone(self, batch: WriteBatch) -> str | None:
        try:
            self._runs.write_batch(batch)
        except Exception as exc:  # noqa: BLE001 - one row is set aside, the rest go on
            log.error("set aside a row the store refused: %s", exc)
            return str(exc)
        self.committed_rows += len(batch)
        return None

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self._interval_s)
            await self.flush()
