"""A consistent copy of a live database, taken by the process that owns it, and a copy
put back in place.

DuckDB lets one process write a file, and a copy of its files under that writer is
consistent only by luck. So the owner copies: `COPY FROM DATABASE` into a new file,
in one transaction, which sees the database as of its start (the engine's writes go
on meanwhile and are not in the copy; its callers flush the engine's writer first, so
every answer counted before is). The copy is a whole promptlab database at the
same migration: open it with `--db`, verify it (`promptlab audit verify`), or put it
in place with `restore_from`, which refuses a database another process holds.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from promptlab.errors import StoreError

if TYPE_CHECKING:
    from promptlab.store.connection import Store


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def copy_database(cur: duckdb.DuckDBPyConnection, target: Path) -> None:
    """Copy the database `cur` is on into a new file at `target`, in one transaction
    (written beside it first, then moved in whole)."""
    alias = f"backup_{uuid.uuid4().hex[:8]}"
    partial = target.with_name(f".{target.name}.{alias}.part")
    try:
        (name,) = cur.execute("SELECT current_database()").fetchone() or ("",)
        cur.execute(f"ATTACH {_quoted(str(partial))} AS {alias}")
        try:
            cur.execute(f'COPY FROM DATABASE "{name}" TO {alias}')
        finally:
            cur.execute(f"DETACH {alias}")
        os.replace(partial, target)
    finally:
        for leftover in (partial, partial.with_name(partial.name + ".wal")):
            leftover.unlink(missing_ok=True)


def backup_to(store: Store, target: Path) -> int:
    """Copy the database as it stands into a new file at `target` (refused if it
    exists); the copy's size in bytes. Written beside it first, then moved in whole."""
    if target.exists():
        raise StoreError(f"backup: {target} exists: name a new file")
    with store.read() as cur:
        copy_database(cur, target)
    return target.stat().st_size


def restore_from(source: Path, target: Path) -> Path | None:
    """Put the database at `source` (a backup) in place at `target`, which no process
    may hold; a database there is moved aside first, never deleted (its new name is
    returned). Refused, in one line, when `source` is not a promptlab database."""
    try:
        with duckdb.connect(str(source), read_only=True) as check:
            check.execute("SELECT count(*) FROM _migrations").fetchone()
    except duckdb.Error as exc:
        raise StoreError(f"restore: {source} is not a promptlab database ({exc})") from None
    aside = None
    if target.exists():
        try:  # refused while another process (a server, the app) holds it
            duckdb.connect(str(target)).close()
        except duckdb.Error as exc:
            if "lock" in str(exc).lower():
                raise StoreError(
                    f"restore: {target} is in use by another process; stop it first"
                ) from None
        aside = target.with_name(f"{target.name}.before-restore-{uuid.uuid4().hex[:8]}")
        os.replace(target, aside)
        wal = target.with_name(target.name + ".wal")
        if wal.exists():
            os.replace(wal, aside.with_name(aside.name + ".wal"))
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    shutil.copyfile(source, partial)
    os.replace(partial, target)
    return aside
