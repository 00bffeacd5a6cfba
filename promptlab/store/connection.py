"""The one object that owns the DuckDB file."""

from __future__ import annotations

import contextlib
import errno
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.errors import DatabaseLockedError, StoreError
from promptlab.store.backup import copy_database
from promptlab.store.migrations import apply_migrations, migration_state

log = logging.getLogger(__name__)

# DuckDB says e.g. 'Conflicting lock is held in /usr/bin/python3.11 (PID 4011) by user me.'
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<holder>\S+ \(PID \d+\))")

#: DuckDB memory for everything but the `items` key index: cached blocks, query
#: intermediates (which spill to disk beyond it). DuckDB's own default is 80% of RAM,
#: so a bulk write of a million results grew its block cache by ~150 MB.
WORKING_MEMORY_BYTES = 64 * 2**20
#: Memory kept for the primary-key index of `items` per row. That index (an ART on a
#: 32-hex-digit key, ~70 bytes a key) stays pinned in memory and cannot spill, so the
#: limit grows with it: a run of any size still fits.
INDEX_BYTES_PER_ITEM = 96


#: What DuckDB says when the file system, not the data, refused a write.
_STORAGE_MESSAGES = (
    "no space left on device",
    "disk quota exceeded",
    "read-only file system",
    "input/output error",
    "could not write file",
    "could not write to file",
    "could not fsync",
)
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


def is_storage_failure(exc: BaseException) -> bool:
    """True when a write failed because the disk cannot take it (full, read-only, I/O).

    Such a failure is no row's fault: retrying row by row cannot help, waiting can.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _STORAGE_ERRNOS:
            return True
        if isinstance(seen, duckdb.Error):
            text = str(seen).lower()
            if any(message in text for message in _STORAGE_MESSAGES):
                return True
        seen = seen.__cause__ or seen.__context__
    return False


def _store_error(exc: duckdb.Error) -> StoreError:
    """DuckDB's error as promptlab's: callers outside the store catch only the tree.

    The text is DuckDB's own, and the DuckDB error stays the cause, so a full disk is
    still recognised (`is_storage_failure` walks the causes).
    """
    return StoreError(str(exc).strip() or type(exc).__name__)


class Store:
    """Owns one DuckDB connection; readers take a cursor, writers a transaction.

    DuckDB lets a single process hold a file for writing. Within the process, every
    thread uses its own `cursor()`; writes go through `transaction()`, which
    serializes writers so one batch commits at a time.
    """

    def __init__(self, path: str | Path, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = Path(path)
        #: The one clock of everything over this file: the store's, the audit log's and
        #: the engine's stamps, and the writer's stall timing (a test passes a manual one).
        self.clock = clock
        if str(self.path) != ":memory:":
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # e.g. a parent is a regular file, or not writable
                raise StoreError(
                    f"cannot create the folder for database {self.path}: "
                    f"{exc.strerror} ({exc.filename})"
                ) from exc
        self._conn = _connect(str(self.path))
        self._write_lock = threading.RLock()
        self._indexed_items = 0
        self._limited = str(self.path) != ":memory:"
        try:
            self._upgrade()
            (count,) = self._conn.execute("SELECT count(*) FROM items").fetchone() or (0,)
            self.reserve_items(int(count))
        except duckdb.Error as exc:
            self._conn.close()
            raise _store_error(exc) from exc
        except StoreError:
            self._conn.close()
            raise

    def _upgrade(self) -> None:
        """Bring the database to this promptlab's migrations. An existing one that lacks
        some is copied beside itself first (`<file>.before-<migration>`) and the move is
        logged (from, to, where the copy is), so an upgrade can be undone; one made by a
        newer promptlab is refused in one line naming both."""
        done, pending = migration_state(self._conn)
        if done and pending and self._limited:
            copy = self.path.with_name(f"{self.path.name}.before-{pending[0].name}")
            if not copy.exists():
                with contextlib.closing(self._conn.cursor()) as cur:
                    copy_database(cur, copy)
            log.warning(
                "database %s: migrating from %s to %s; a copy of it as it was is %s",
                self.path,
                done[-1],
                pending[-1].name,
                copy,
            )
        apply_migrations(self._conn, now=self.clock.now)

    def reserve_items(self, count: int) -> None:
        """Make room in DuckDB's memory limit for the key index of `count` more items.

        Called before items are inserted; the limit never shrinks (deleted keys may
        still be in the index until a checkpoint).
        """
        with self._write_lock:  # callers are worker threads: one of them at a time
            self._indexed_items += count
            if self._limited:
                limit = WORKING_MEMORY_BYTES + INDEX_BYTES_PER_ITEM * self._indexed_items
                try:
                    self._conn.execute(f"SET memory_limit = '{limit}B'")
                except duckdb.Error as exc:
                    raise _store_error(exc) from exc

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        cur = self._conn.cursor()
        try:
            yield cur
        except duckdb.Error as exc:
            raise _store_error(exc) from exc
        finally:
            cur.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction: committed on success, rolled back on any error."""
        with self._write_lock:
            cur = self._conn.cursor()
            try:
                cur.begin()
                yield cur
                cur.commit()
            except BaseException as exc:
                # A failed COMMIT has already ended the transaction, and rollback() would
                # then raise "no transaction is active", hiding the real cause.
                with contextlib.suppress(duckdb.Error):
                    cur.rollback()
                if isinstance(exc, duckdb.Error):
                    raise _store_error(exc) from exc
                raise
            finally:
                cur.close()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connect(path: str) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(path)
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            match = _LOCK_HOLDER.search(text)
            raise DatabaseLockedError(path, match["holder"] if match else None) from exc
        raise StoreError(f"cannot open database {path}: {_first_line(text)}") from exc
    except duckdb.Error as exc:
        raise StoreError(f"cannot open database {path}: {_first_line(str(exc))}") from exc


def _first_line(text: str) -> str:
    """DuckDB messages may run over several lines; an error is shown as one."""
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
