"""The engine's one writer: buffers dispatch marks, attempts and results, commits in batches.

When the store cannot write at all (a full disk, a read-only or vanished file system),
nothing answered is dropped: the rows stay in memory, `writable` turns false so runs
stop dispatching (backpressure), and if the store stays unwritable for STALL_STOP_S the
runs are stopped with the store's own message. Rows still held when the engine closes
are spilled to a side file (see `promptlab.engine.record.spill`), which the next engine on the
same database ingests before anything else.

Every row is also appended to the answer log (promptlab.engine.record.answerlog) as it comes,
a final row written out before `final` returns: a process killed between two commits
loses no answer, and the next engine folds the log into the store before any resume.

Answers for the response cache (promptlab/engine/send/cache.py) are batched here too, but
best effort, outside the answer log and the spill files: each is a copy of a final row
those already keep, so one the store does not take is only sent again by a later run.
They are put after a commit every few seconds, and at every flush a caller asks for (a
run's end, the engine's close), each time in a transaction of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from promptlab.audit.chain import AuditDraft
from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.engine.record.answerlog import AnswerLog, Segment
from promptlab.engine.record.spill import spill_batch
from promptlab.records import AttemptRow, FinalRow, ItemErrorKind, WriteBatch
from promptlab.records.cache import CacheEntry
from promptlab.store.connection import is_storage_failure
from promptlab.store.items import ItemStore
from promptlab.store.response_cache import ResponseCacheStore

log = logging.getLogger(__name__)

#: How a store that cannot write is described, in stop reasons and logs.
STORE_UNWRITABLE = "the database cannot be written"

#: Commit at least this often, so a crash loses at most this much of finished work.
FLUSH_INTERVAL_S = 0.2
#: Commit early when this many rows wait: hundreds per transaction keeps DuckDB fast.
FLUSH_ROWS = 2_000
#: Seconds between attempts after a failed commit (the batch is kept and retried).
RETRY_FLUSH_S = 1.0
#: Failed commits in a row after which the batch is written row by row, so one row the
#: store cannot take (it would fail every time) is set aside instead of stalling all runs.
MAX_BATCH_FAILURES = 3
#: Seconds the store may stay unwritable before runs are stopped with its message: long
#: enough to ride out a hiccup, short enough that a full disk is reported promptly.
STALL_STOP_S = 10.0
#: Cache answers held while the store cannot write; past it, new ones are not cached.
MAX_HELD_CACHE = 20_000
#: The flush loop puts cache answers this often (or once this many wait); a flush asked
#: for (a run's end, the engine's close) puts them all. Each put is a commit of its own
#: that holds the write lock the results' commits wait for: a few a minute, not five a
#: second (a run reads the stored entries once, at its start; its own answers it
#: holds in its index).
CACHE_PUT_INTERVAL_S = 5.0
CACHE_PUT_ROWS = 5_000


# Not a PromptlabError: a signal inside the writer, which keeps the unwritten rows and
# reports the cause as a stall (STORE_UNWRITABLE).
class StorageFailure(Exception):
    """The disk refused a row-by-row write; `unwritten` holds the rows not yet stored."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.unwritten = WriteBatch()


def _joined(rows: list[WriteBatch]) -> WriteBatch:
    joined = WriteBatch()
    for row in rows:
        joined.dispatched += row.dispatched
        joined.attempts += row.attempts
        joined.finals += row.finals
        joined.audit += row.audit
    return joined


#: Upper bounds (seconds) of the batch-commit latency histogram (WriterStats).
WRITE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class WriterStats:
    """What the writer did since the engine started, for monitoring (/metrics)."""

    #: Batch commits per upper bound of WRITE_BUCKETS_S (not cumulative), and above.
    bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(WRITE_BUCKETS_S) + 1))
    commits: int = 0
    commit_seconds: float = 0.0
    rows: int = 0
    failed_commits: int = 0
    spills: int = 0
    spilled_rows: int = 0
    #: Lines appended to the answer log, and its group commits (fdatasync calls).
    logged_lines: int = 0
    log_syncs: int = 0

    def observe(self, seconds: float, rows: int) -> None:
        index = next((i for i, b in enumerate(WRITE_BUCKETS_S) if seconds <= b), -1)
        self.bucket_counts[index] += 1
        self.commits += 1
        self.commit_seconds += seconds
        self.rows += rows


class BatchWriter:
    """Collects writes from every run on the engine loop; one flush commits at a time."""

    def __init__(
        self,
        items: ItemStore,
        interval_s: float = FLUSH_INTERVAL_S,
        *,
        spill_dirs: tuple[Path, ...] = (),
        on_stall: Callable[[str], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        answer_log: bool = True,
    ) -> None:
        self._items = items
        self._clock = clock
        self._interval_s = interval_s
        self._spill_dirs = spill_dirs
        self._on_stall = on_stall
        #: In the first spill folder (next to the database); none for an in-memory one.
        self._log = AnswerLog(spill_dirs[0]) if answer_log and spill_dirs else None
        self._batch = WriteBatch()
        #: Answers for the response cache, put after the next commit (best effort).
        self._cached: list[CacheEntry] = []
        self._cache_store = ResponseCacheStore(items.store)
        self._cache_put_at = clock.monotonic()
        self._lock = asyncio.Lock()
        self._full = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.committed_rows = 0
        self.stats = WriterStats()
        self.last_error: str | None = None
        self._failures = 0
        #: Why the store cannot write, while it cannot; None when it can.
        self.stalled_reason: str | None = None
        self._stalled_since: float | None = None
        self._stall_reported = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="batch-writer")

    async def stop(self) -> Path | None:
        """Stop the flush loop and commit what is left; spill it when the store cannot.

        Returns the spill file when rows had to be set aside there.
        """
        if self._task is not None:
            # Let the loop finish the write it may be in: cancelling it mid-commit could
            # drop that batch if the commit then failed.
            self._stopping.set()
            self._full.set()
            await self._task
            self._task = None
        if await self.flush():
            self._close_log(keep=False)
            return None
        spilled = self._spill()
        # Not spilled: the log's segments still hold the rows, for the next engine.
        self._close_log(keep=spilled is None)
        return spilled

    def _close_log(self, *, keep: bool) -> None:
        if self._log is not None:
            self._log.close(keep=keep)

    # ---- what runs record ------------------------------------------------------------

    def dispatched(self, key: str) -> None:
        self._batch.dispatched.append(key)
        self._check_full()

    def attempt(self, row: AttemptRow) -> None:
        self._batch.attempts.append(row)
        if self._log is not None:
            self._log.attempt(row)
        self._check_full()

    def final(self, row: FinalRow, draft: AuditDraft | None = None) -> None:
        """The item's final row and its result event (`draft`): on disk in the answer
        log when this returns, so the caller may count the item as received."""
        self._batch.finals.append(row)
        if draft is not None:
            self._batch.audit.append(draft)
        if self._log is not None:
            self._log.final(row, draft)
        self._check_full()

    def audit(self, draft: AuditDraft) -> None:
        """A trace event, committed with the rows it describes (same batch)."""
        self._batch.audit.append(draft)
        if self._log is not None:
            self._log.audit(draft)

    def cache(self, entry: CacheEntry) -> None:
        """An answer for the response cache: put after the next commit, best effort."""
        if len(self._cached) < MAX_HELD_CACHE:
            self._cached.append(entry)

    def _cache_due(self) -> bool:
        waited = self._clock.monotonic() - self._cache_put_at
        return len(self._cached) >= CACHE_PUT_ROWS or waited >= CACHE_PUT_INTERVAL_S

    async def _put_cached(self) -> None:
        self._cache_put_at = self._clock.monotonic()
        entries, self._cached = self._cached, []
        if not entries:
            return
        try:
            await asyncio.to_thread(self._cache_store.put, entries)
        except Exception as exc:  # noqa: BLE001 - an answer not cached is only sent again
            log.warning("%d answers were not kept in the response cache: %s", len(entries), exc)

    def _check_full(self) -> None:
        if len(self._batch) >= FLUSH_ROWS:
            self._full.set()

    async def wait_writable(self) -> str | None:
        """Wait until the store takes writes (at once when it does).

        Returns None then, or the reason when the store has stayed unwritable for
        STALL_STOP_S: the caller should stop instead of dispatching.
        """
        await self._writable.wait()
        return self.stalled_reason if self._stall_reported else None

    # ---- committing ------------------------------------------------------------------

    async def flush(self, *, cache: bool = True) -> bool:
        """Commit everything buffered so far; True once it is stored.

        Retries failed commits. After MAX_BATCH_FAILURES failures in a row the batch goes
        row by row, so one row that can never be stored is set aside. When the store
        cannot write at all, gives up (False, rows kept) once it has been so for
        STALL_STOP_S.
        """
        while True:
            try:
                await self._flush_once()
                if cache:  # the flush loop's turns put them now and then (_cache_due)
                    await self._put_cached()
                return True
            except Exception:  # noqa: BLE001 - reported in _flush_once; the rows are kept
                if self._stalled_for() >= STALL_STOP_S:
                    return False
                await asyncio.sleep(RETRY_FLUSH_S)

    def _stalled_for(self) -> float:
        return 0.0 if self._stalled_since is None else self._clock.monotonic() - self._stalled_since

    async def _flush_once(self) -> None:
        async with self._lock:
            batch, self._batch = self._batch, WriteBatch()
            # The segments holding this batch's rows (and those of failed commits kept
            # in it): deleted once it is stored, kept for the next try otherwise.
            logged = self._seal_log()
            self._full.clear()
            if not len(batch):
                return
            if self._failures >= MAX_BATCH_FAILURES and self.stalled_reason is None:
                try:
                    await asyncio.to_thread(self._write_row_by_row, batch)
                except StorageFailure as failure:
                    self._keep(failure.unwritten)
                    self._failed(failure.cause)
                    raise
                self._failures = 0
                self._drop_logged(logged)
                return
            started = self._clock.monotonic()
            try:
                await asyncio.to_thread(self._items.write_batch, batch)
            except Exception as exc:
                # Keep the rows: they go out with the next try. Nothing is dropped.
                self._keep(batch)
                self._failed(exc)
                self.stats.failed_commits += 1
                raise
            self.stats.observe(self._clock.monotonic() - started, len(batch))
            self._drop_logged(logged)
            self._failures = 0
            self.committed_rows += len(batch)
            self.last_error = None
            if self.stalled_reason is not None:
                log.warning("the store takes writes again; dispatch resumes")
            self.stalled_reason, self._stalled_since, self._stall_reported = None, None, False
            self._writable.set()

    def _seal_log(self) -> list[Segment]:
        if self._log is None:
            return []
        self.stats.logged_lines, self.stats.log_syncs = self._log.lines, self._log.syncs
        return self._log.seal()

    def _drop_logged(self, logged: list[Segment]) -> None:
        if self._log is not None and logged:
            self._log.drop(logged)

    def _keep(self, batch: WriteBatch) -> None:
        self._batch.dispatched[:0] = batch.dispatched
        self._batch.attempts[:0] = batch.attempts
        self._batch.finals[:0] = batch.finals
        self._batch.audit[:0] = batch.audit

    def _failed(self, exc: Exception) -> None:
        self.last_error = str(exc)
        if not is_storage_failure(exc):
            self._failures += 1
            log.exception("batch write failed; will retry")
            return
        # Not this batch's fault: no row-by-row write could succeed. Hold everything and
        # stop dispatching until the store takes writes again.
        if self.stalled_reason is None:
            self._stalled_since = self._clock.monotonic()
            log.error("the store cannot write; dispatch paused: %s", exc)
        self.stalled_reason = f"{STORE_UNWRITABLE}: {exc}"
        if not self._stall_reported:
            self._writable.clear()

    def _write_row_by_row(self, batch: WriteBatch) -> None:
        """Commit each row alone; a final row the store refuses is kept as a failure.

        A storage failure (the disk, not the row) stops the pass: the rows not yet
        written go back to the caller inside the StorageFailure.
        """
        rows = [WriteBatch(dispatched=[key]) for key in batch.dispatched]
        rows += [WriteBatch(attempts=[attempt]) for attempt in batch.attempts]
        rows += [WriteBatch(finals=[final]) for final in batch.finals]
        # The trace goes last and whole: chained in order, it never depends on one row.
        # Its result events carry the hash of their final row as stored, which may be
        # the row's stand-in (see _write_one): hashed once the finals are written.
        if batch.audit:
            rows.append(WriteBatch(audit=batch.audit))
        for position, row in enumerate(rows):
            if row.audit:
                written = [f for r in rows[:position] for f in r.finals]
                self._items.attach_result_digests(WriteBatch(finals=written, audit=row.audit))
            try:
                self._write_one(row)
            except StorageFailure as failure:
                failure.unwritten = _joined(rows[position:])
                raise

    def _write_one(self, row: WriteBatch) -> None:
        error = self._write_alone(row)
        if error is None or not row.finals:
            return
        # The item still gets its one final row, without what could not be stored.
        stored = replace(
            row.finals[0],
            status="failed",
            error_kind=ItemErrorKind.STORE_ERROR,
            error_message=f"the result could not be stored: {error}"[:500],
            output_text=None,
            params={},
        )
        if self._write_alone(WriteBatch(finals=[stored])) is None:
            row.finals[0] = stored  # what the item's result event must hash

    def _write_alone(self, batch: WriteBatch) -> str | None:
        try:
            self._items.write_batch(batch)
        except Exception as exc:  # noqa: BLE001 - one row is set aside, the rest go on
            if is_storage_failure(exc):
                raise StorageFailure(exc) from exc
            log.error("set aside a row the store refused: %s", exc)
            return str(exc)
        self.committed_rows += len(batch)
        return None

    @property
    def spill_dirs(self) -> tuple[Path, ...]:
        """Where rows the store cannot take go (engine/record/spill.py), in order of preference."""
        return self._spill_dirs

    def _spill(self) -> Path | None:
        """Write the held rows to the first spill folder that takes them."""
        batch, self._batch = self._batch, WriteBatch()
        if not len(batch):
            return None
        for folder in self._spill_dirs:
            try:
                path = spill_batch(batch, folder)
            except OSError as exc:
                log.warning("cannot spill to %s: %s", folder, exc)
                continue
            log.error("the store cannot write: %d rows kept in %s for resume", len(batch), path)
            self.stats.spills += 1
            self.stats.spilled_rows += len(batch)
            return path
        self._keep(batch)
        log.error(
            "the store cannot write and no spill folder took the %d rows held; the "
            "answers the answer log holds are stored by the next engine, the rest are "
            "sent again on resume",
            len(batch),
        )
        return None

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self._interval_s)
            if self._stopping.is_set() or await self.flush(cache=self._cache_due()):
                continue
            if not self._stall_reported:
                self._stall_reported = True
                # Runs waiting to dispatch wake up to see that the store gave out, and stop.
                self._writable.set()
                if self._on_stall is not None:
                    self._on_stall(self.stalled_reason or STORE_UNWRITABLE)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), RETRY_FLUSH_S)
