"""Rows the store could not take, kept in a side file until a later engine ingests them.

When the database cannot be written (a full disk), the writer holds answered results in
memory; if the process must end before the store recovers, they go to a JSON Lines file
here instead of being lost. The next workbench on the same database (any command, the
app) commits them as it opens (`store_spills`), and so does every Engine before any
resume reopens items, so no answered request is sent again. The answer log's segments
(promptlab.engine.record.answerlog) use this file format and are folded at the same moment.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
import uuid
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from promptlab.audit.chain import payload_text
from promptlab.audit.redact import Redactor
from promptlab.engine.record.answerlog import fold_answer_logs
from promptlab.engine.record.batchlines import add_record
from promptlab.errors import StoreError
from promptlab.records import WriteBatch
from promptlab.store.items import ItemStore, redacted_batch

log = logging.getLogger(__name__)

SPILL_SUFFIX = ".jsonl"
#: Longest output a result row holds (characters). DuckDB's memory limit (64 MB) is
#: shared by a whole commit: a 50 MB answer failed its batch's write. A longer answer is
#: kept in a file beside the spills (`keep_too_large`) and its item fails `too_large`.
MAX_OUTPUT_CHARS = 8 * 2**20


def spill_dirs(db_path: Path) -> tuple[Path, ...]:
    """Where spills of this database go, in order of preference.

    Next to the database first; the system temp folder second, since the database's
    own disk may be the one that is full. Named after the database's resolved path.
    No folder for an in-memory database: it ends with its process.
    """
    if str(db_path) == ":memory:":
        return ()
    resolved = db_path.resolve()
    tag = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    # Per user in the shared temp folder: nobody else may read the answers or plant rows.
    user = f"{os.getuid()}" if hasattr(os, "getuid") else "user"
    return (
        resolved.parent / f"{resolved.name}.unsaved",
        Path(tempfile.gettempdir()) / f"promptlab-unsaved-{user}" / f"{resolved.name}-{tag}",
    )


def spill_batch(batch: WriteBatch, folder: Path) -> Path:
    """Write `batch` to a new file in `folder` (fsynced, then renamed into place).

    Messages and outputs are redacted first, as they would be in the store; the folder
    and file are readable by their owner only.
    """
    batch = redacted_batch(batch, Redactor.from_environ())
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = f"{datetime.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    partial = folder / f"{name}.partial"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(descriptor, "w", encoding="utf-8") as handle:
        for key in batch.dispatched:
            handle.write(json.dumps({"row": "dispatched", "key": key}) + "\n")
        for attempt in batch.attempts:
            handle.write(json.dumps({"row": "attempt", **asdict(attempt)}, default=str) + "\n")
        for final in batch.finals:
            handle.write(json.dumps({"row": "final", **asdict(final)}, default=str) + "\n")
        for draft in batch.audit:
            # The payload as it would be stored (its datetimes in ISO 8601).
            payload = json.loads(payload_text(draft.payload))
            record = {"row": "audit", **asdict(draft), "payload": payload}
            handle.write(json.dumps(record, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    # Only whole files are ingested: a crash half-way leaves a .partial, never a .jsonl.
    path = partial.with_suffix(SPILL_SUFFIX)
    partial.rename(path)
    return path


def spilled_files(folders: tuple[Path, ...]) -> list[Path]:
    """Spill files waiting in `folders`, oldest first: regular files this user owns only
    (a file planted by someone else, or a symlink, would be taken as stored answers)."""
    found: list[Path] = []
    for folder in folders:
        if folder.is_dir() and not folder.is_symlink():
            found.extend(p for p in folder.glob(f"*{SPILL_SUFFIX}") if _own_regular_file(p))
    return sorted(found, key=lambda p: p.name)


def store_spills(items: ItemStore, folders: tuple[Path, ...]) -> int:
    """Commit the rows of every spill file in `folders`, oldest first, deleting each once
    stored; return how many files. StoreError when the database cannot take them yet.

    The answer logs of engines that are gone (a process killed) are folded first
    (promptlab.engine.record.answerlog): their answers then count, and are not sent again.
    """
    for folder in folders:
        fold_answer_logs(items, folder)
    spilled = spilled_files(folders)
    for path in spilled:
        try:
            items.ingest_spill(read_spill(path))
        except Exception as exc:
            # Resuming now would send those answered requests again: refuse instead.
            raise StoreError(
                f"{path} holds answered results the database cannot take yet ({exc}); "
                "free space and try again"
            ) from exc
        path.unlink()
        log.warning("stored the rows kept in %s while the database could not write", path)
    return len(spilled)


def _own_regular_file(path: Path) -> bool:
    info = path.lstat()
    owner_ok = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return stat.S_ISREG(info.st_mode) and owner_ok


def read_spill(path: Path) -> WriteBatch:
    """The rows of one spill file."""
    batch = WriteBatch()
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            add_record(batch, json.loads(line))
    return batch


def keep_too_large(folders: tuple[Path, ...], run_id: str, key: str, text: str) -> Path | None:
    """Write an answer too large for a result row, redacted and readable by this user
    alone, beside the first spill folder that takes it (`<folder>.too-large/<run>/
    <key>.txt`: not a spill, never ingested); None when none did."""
    for folder in folders:
        target = folder.parent / f"{folder.name}.too-large" / run_id / f"{key}.txt"
        try:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(Redactor.from_environ()(text))
        except OSError as exc:
            log.warning("cannot keep a too-large answer in %s: %s", folder, exc)
            continue
        return target
    return None
