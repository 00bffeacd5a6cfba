"""The engine's one writer: buffers dispatch marks, attempts and results, commits in batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from promptlab.store.runs import AttemptRow, FinalRow, RunStore, WriteBatch

log = logging.getLogger(__name__)

#: Commit at least this often, so a crash loses at most this much of finished work.
FLUSH_INTERVAL_S = 0.2
#: Commit early when this many rows wait: hundreds per transaction keeps DuckDB fast.
FLUSH_ROWS = 2_000
#: Seconds between attempts after a failed commit (the batch is kept and retried).
RETRY_FLUSH_S = 1.0


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
        """Commit everything buffered so far (waits for a flush already under way)."""
        async with self._lock:
            batch, self._batch = self._batch, WriteBatch()
            self._full.clear()
            if not len(batch):
                return
            try:
                await asyncio.to_thread(self._runs.write_batch, batch)
            except Exception as exc:
                # Keep the rows: they go out with the next flush. Nothing is dropped.
                self.last_error = str(exc)
                log.exception("batch write failed; will retry")
                self._batch.dispatched[:0] = batch.dispatched
                self._batch.attempts[:0] = batch.attempts
                self._batch.finals[:0] = batch.finals
                raise
            self.committed_rows += len(batch)
            self.last_error = None

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self._interval_s)
            try:
                await self.flush()
            except Exception:
                await asyncio.sleep(RETRY_FLUSH_S)
