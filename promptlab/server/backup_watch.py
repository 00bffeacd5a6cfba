"""Rotating backups taken by the process that owns the database: `promptlab serve
--backup-every 1h --backup-keep 48` (or PROMPTLAB_BACKUP_EVERY and PROMPTLAB_BACKUP_KEEP
for the app serving the API beside its pages).

Each copy is the consistent, live one `promptlab backup` takes (`Workbench.backup`: the
engine's answers flushed, then DuckDB's own copy), written to a new file named by its
UTC time, `promptlab-20261207T180000Z.duckdb`, in the backup folder (`backups/` beside
the database unless PROMPTLAB_BACKUP_DIR names another). Once a copy is complete, the
oldest beyond `keep` are deleted: a failed copy deletes nothing. Only files of that
name pattern are ever deleted, so the folder may hold other files.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from promptlab.server.periodic import Periodic

log = logging.getLogger(__name__)

#: A backup's file name: its UTC time, so names sort as times do.
NAME = re.compile(r"promptlab-\d{8}T\d{6}Z(?:-\d+)?\.duckdb")


def backup_name(now: datetime, taken: set[str]) -> str:
    """The file name of a copy taken at `now` (a suffix when one of that second exists)."""
    stem = f"promptlab-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}"
    name, n = f"{stem}.duckdb", 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}.duckdb"
    return name


class BackupWatch:
    """Calls `backup(path)` every `every_s` on its own thread, keeping the newest `keep`."""

    def __init__(
        self, backup: Callable[[Path], int], folder: Path, every_s: float, keep: int
    ) -> None:
        self._backup = backup
        self.folder = folder
        self._keep = keep
        self._periodic = Periodic(
            "promptlab-backups", every_s, self.take, f"the scheduled backup to {folder}"
        )
        #: Copies completed so far (a test waits on it instead of sleeping).
        self.taken = 0

    def start(self) -> BackupWatch:
        self._periodic.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        self._periodic.stop(timeout_s)

    def backups(self) -> list[Path]:
        """The copies in the folder, oldest first."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if NAME.fullmatch(p.name))

    def take(self) -> Path:
        """One copy now, then the oldest beyond `keep` deleted."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self.folder / backup_name(datetime.now(UTC), {p.name for p in self.backups()})
        size = self._backup(target)
        self.taken += 1
        for old in self.backups()[: -self._keep]:
            old.unlink(missing_ok=True)
        log.info("backup %s (%d bytes)", target, size)
        return target
