"""The answer log: an answer is on disk before the engine counts it received.

The writer commits to DuckDB in batches (every FLUSH_INTERVAL_S), so answers that
arrived since the last commit lived only in memory: a process killed then (SIGKILL, the
OOM killer) lost them, and the resume sent their requests again, paid twice. Now every
row the writer takes is also appended to this log, and a final row is written out (one
`write`, its attempts and trace events with it) before `BatchWriter.final` returns, so
before the item is counted, its session's next turn is sent or its permit is used again.

Durability: a written line is in the kernel's page cache, which outlives the process, so
a SIGKILL loses none. Against a power loss a syncer thread `fdatasync`s the open segment
as a group commit: at most every GROUP_COMMIT_S, covering every line written since, off
the engine loop.

Segments: the log is a series of files (`*.answers`, one JSON record a line, in the spill
file format: promptlab.engine.record.spill) in the database's spill folder. Each flush of the
writer seals the open segment with the batch it commits; once that commit is stored, its
segments are deleted. A segment is locked (`flock`) while its writer lives, so only
segments whose process is gone are folded into the store (`fold_answer_logs`, run with
the spills whenever a workbench or engine opens the database), before anything resumes.
Folding is idempotent (`ItemStore.ingest_spill`): a segment whose batch was stored just
before a crash adds nothing.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson

from promptlab.audit.chain import AuditDraft
from promptlab.audit.redact import Redactor
from promptlab.engine.record.batchlines import add_record
from promptlab.errors import StoreError
from promptlab.records import AttemptRow, FinalRow, WriteBatch
from promptlab.store.items import ItemStore, redacted_batch

try:  # POSIX; elsewhere segments are not locked (one engine per database file)
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms the suite runs on
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

LOG_SUFFIX = ".answers"
#: The syncer's group commit: at most one `fdatasync` this often (every write since the
#: last one rides on it). Short against a power loss, long enough not to spin on a fast disk.
GROUP_COMMIT_S = 0.005

_datasync = getattr(os, "fdatasync", os.fsync)


def _plain(value: Any) -> Any:
    # Params may be read-only mappings; orjson takes dicts only.
    if isinstance(value, Mapping | MappingProxyType):
        return dict(value)
    return str(value)


def _line(kind: bytes, row: Any) -> bytes:
    """One record as the spill format writes it: {"row": kind, field: value, ...}."""
    body = orjson.dumps(row, default=_plain, option=orjson.OPT_NON_STR_KEYS)
    return b'{"row":"' + kind + b'",' + body[1:] + b"\n"


def _masked(row: Any, redactor: Redactor) -> Any:
    if isinstance(row, AttemptRow):
        return redacted_batch(WriteBatch(attempts=[row]), redactor).attempts[0]
    if isinstance(row, FinalRow):
        return redacted_batch(WriteBatch(finals=[row]), redactor).finals[0]
    return AuditDraft(
        row.chain,
        row.kind,
        row.event_id,
        row.at,
        redactor.value(dict(row.payload)),
        row.actor,
        row.run_id,
        row.trace_id,
    )


class Segment:
    """One log file, open and locked by its writer until its rows are stored."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.broken = False
        #: Held while the descriptor is duplicated or closed, never across a sync: the
        #: engine loop closing a segment never waits for the disk.
        self.lock = threading.Lock()
        self.closed = False

    def sync(self) -> bool:
        """fdatasync what was written (on a duplicate of the descriptor, which the
        engine loop may close meanwhile); False when there was nothing to sync."""
        with self.lock:
            if self.closed or self.broken:
                return False
            fd = os.dup(self.fd)
        try:
            _datasync(fd)
        except OSError as exc:
            log.warning("answer log %s: fdatasync failed: %s", self.path, exc)
        finally:
            os.close(fd)
        return True

    def unlink(self) -> None:
        """Delete the file (its rows are stored); the descriptor stays open until `close`."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def close(self, *, unlink: bool) -> None:
        with self.lock:
            if self.closed:
                return
            if unlink:  # before closing: nobody can lock and fold it in between
                self.unlink()
            os.close(self.fd)
            self.closed = True


class AnswerLog:
    """The engine writer's append-only log (see the module docstring). Used on the
    engine loop only; its syncer thread only syncs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._current: Segment | None = None
        self._sealed: list[Segment] = []
        #: Rows taken since the last write (attempts, trace events), with their kind.
        self._pending: list[tuple[bytes, AttemptRow | FinalRow | AuditDraft]] = []
        self._count = 0
        self._redactor: Redactor | None = None
        self._dirty = threading.Event()
        #: Segments deleted, whose descriptors the syncer closes: a close after an
        #: unlink frees the file's blocks, which took milliseconds on the engine loop.
        self._retired: collections.deque[Segment] = collections.deque()
        self._closing = False
        self._syncer: threading.Thread | None = None
        self._warned = False
        #: Lines written and fdatasyncs made (WriterStats, bench/killed.py).
        self.lines = 0
        self.syncs = 0

    # ---- what the writer takes ---------------------------------------------------

    def attempt(self, row: AttemptRow) -> None:
        self._pending.append((b"attempt", row))

    def audit(self, draft: AuditDraft) -> None:
        self._pending.append((b"audit", draft))

    def final(self, row: FinalRow, draft: AuditDraft | None) -> None:
        """The final row (with what is pending) written out before this returns."""
        self._pending.append((b"final", row))
        if draft is not None:
            self._pending.append((b"audit", draft))
        self._write_pending()

    def _encoded(self) -> bytes:
        """The pending rows as lines, secrets masked as the store masks them: the file
        is on disk (readable by its owner only) until its batch is stored."""
        data = b"".join(_line(kind, row) for kind, row in self._pending)
        # Made again per segment (each flush): keys of endpoints added since are masked.
        redactor = self._redactor = self._redactor or Redactor.from_environ()
        # One test for all the lines: most hold nothing to mask (bench/redaction.py).
        if not redactor.suspects(data):
            return data
        return b"".join(_line(kind, _masked(row, redactor)) for kind, row in self._pending)

    # ---- segments ----------------------------------------------------------------

    def seal(self) -> list[Segment]:
        """Close the open segment to new rows (a batch is being committed): return every
        sealed segment not yet dropped, which together hold that batch's logged rows."""
        self._write_pending()
        if self._current is not None:
            self._sealed.append(self._current)
            self._current = None
            self._redactor = None
        return list(self._sealed)

    def drop(self, segments: list[Segment]) -> None:
        """Their rows are stored: delete the segments (now: nothing folds them again);
        the syncer thread closes them."""
        for segment in segments:
            segment.unlink()
        gone = set(map(id, segments))
        self._sealed = [s for s in self._sealed if id(s) not in gone]
        if self._syncer is None:
            self._close_retired(segments)
            return
        self._retired.extend(segments)
        self._wake()

    def close(self, *, keep: bool) -> None:
        """Stop the syncer; delete every segment, or (`keep`) leave them to be folded by
        the next engine on this database (rows the store could not take)."""
        self._write_pending()
        self._closing = True
        self._dirty.set()
        if self._syncer is not None:
            self._syncer.join()
            self._syncer = None
        self._close_retired()
        segments = [*self._sealed, *([self._current] if self._current else [])]
        for segment in segments:
            if keep:
                segment.sync()
            segment.close(unlink=not keep)
        self._sealed, self._current = [], None

    def _write_pending(self) -> None:
        if not self._pending:
            return
        data = self._encoded()
        lines = len(self._pending)
        self._pending.clear()
        segment = self._current or self._open()
        if segment is None or segment.broken:
            return  # the rows are still in the writer's memory; see _open
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(segment.fd, view) :]
        except OSError as exc:
            # A full disk: the log is off until the next segment (the next flush).
            segment.broken = True
            self._warn(f"cannot append to {segment.path}: {exc}")
            return
        self.lines += lines
        self._wake()

    def _wake(self) -> None:
        # Set only when clear: Event.set takes a lock and notifies even when it is set,
        # once per answer. A write after the syncer's clear finds it clear and sets it.
        if not self._dirty.is_set():
            self._dirty.set()

    def _close_retired(self, segments: list[Segment] | None = None) -> None:
        for segment in segments or ():
            segment.close(unlink=False)
        while self._retired:
            self._retired.popleft().close(unlink=False)

    def _open(self) -> Segment | None:
        """A new segment, locked; None (rows kept in memory only) when it cannot be made."""
        # Names sort in writing order: segments are folded oldest first.
        self._count += 1
        name = f"{time.time_ns():020d}-{os.getpid()}-{self._count:06d}"
        path = self.folder / f"{name}{LOG_SUFFIX}"
        # Locked under another name, then renamed: a folder never sees it unlocked.
        partial = self.folder / f"{name}.partial"
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        except OSError as exc:
            self._warn(f"cannot open {partial}: {exc}")
            return None
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new and ours: uncontended
            partial.rename(path)
        except OSError as exc:
            os.close(fd)
            self._warn(f"cannot open {path}: {exc}")
            return None
        self._current = Segment(path, fd)
        self._warned = False
        if self._syncer is None:
            self._syncer = threading.Thread(
                target=self._sync_loop, name="promptlab-answer-log", daemon=True
            )
            self._syncer.start()
        return self._current

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("answer log off until the next batch: %s", message)

    def _sync_loop(self) -> None:
        while True:
            self._dirty.wait()
            if self._closing:
                return
            self._dirty.clear()
            self._close_retired()
            segment = self._current
            if segment is not None and segment.sync():
                self.syncs += 1
            # Lines written meanwhile go with the next fdatasync: one per GROUP_COMMIT_S.
            time.sleep(GROUP_COMMIT_S)


# ---- folding into the store -----------------------------------------------------------


def fold_answer_logs(items: ItemStore, folder: Path) -> int:
    """Store the rows of every segment in `folder` whose writer is gone, oldest first,
    deleting each once stored; return how many segments. StoreError when the database
    cannot take them (resuming then would send answered requests again)."""
    if not folder.is_dir() or folder.is_symlink():
        return 0
    folded = 0
    for path in sorted(folder.glob(f"*{LOG_SUFFIX}"), key=lambda p: p.name):
        fd = _claim(path)
        if fd is None:
            continue
        try:
            batch = read_answer_log(path)
            try:
                items.ingest_spill(batch)
            except Exception as exc:
                raise StoreError(
                    f"{path} holds answers the database cannot take yet ({exc}); "
                    "free space and try again"
                ) from exc
            path.unlink()
        finally:
            os.close(fd)
        folded += 1
        log.warning("stored %d results kept in %s by a process that ended", len(batch.finals), path)
    return folded


def _claim(path: Path) -> int | None:
    """The segment opened and locked for folding; None when its writer still lives or it
    is not a regular file this user owns (a planted file would be taken as answers)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    info = os.fstat(fd)
    owner_ok = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    if not (owner_ok and (info.st_mode & 0o170000) == 0o100000):
        os.close(fd)
        return None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
    return fd


def read_answer_log(path: Path) -> WriteBatch:
    """The rows of one segment; a line cut short (a process killed mid-write, a full
    disk) is skipped: the row it held was never counted as received."""
    batch = WriteBatch()
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                record = json.loads(raw)
            except ValueError:
                log.warning("%s: line %d is cut short; skipped", path, number)
                continue
            add_record(batch, record)
    return batch
