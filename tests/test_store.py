from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import duckdb
import pytest

from promptlab.errors import DatabaseLockedError, StoreError
from promptlab.store import MIGRATIONS, Migration, Store, apply_migrations


def test_migrations_are_recorded_once(db_path: Path) -> None:
    with Store(db_path) as store, store.read() as cur:
        rows = cur.execute("SELECT name FROM _migrations ORDER BY name").fetchall()
        names = [r[0] for r in rows]
    assert names == sorted(m.name for m in MIGRATIONS)
    with Store(db_path) as store, store.read() as cur:  # reopening applies nothing new
        assert cur.execute("SELECT count(*) FROM _migrations").fetchone() == (len(MIGRATIONS),)


def test_migration_names_are_unique_and_ordered() -> None:
    names = [m.name for m in MIGRATIONS]
    assert len(names) == len(set(names))
    assert names == sorted(names)


def test_failed_migration_rolls_back_whole(tmp_path: Path) -> None:
    conn = duckdb.connect(str(tmp_path / "m.duckdb"))
    broken = Migration("0001_broken", ("CREATE TABLE t (x INTEGER)", "NOT SQL"))
    with pytest.raises(duckdb.Error):
        apply_migrations(conn, (broken,))
    assert conn.execute("SELECT count(*) FROM _migrations").fetchone() == (0,)
    tables = conn.execute("SELECT table_name FROM information_schema.tables").fetchall()
    assert ("t",) not in tables


def test_transaction_rolls_back_on_error(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.execute("INSERT INTO prompts VALUES ('x', '', now())")
        raise RuntimeError("boom")
    with store.read() as cur:
        assert cur.execute("SELECT count(*) FROM prompts").fetchone() == (0,)


def test_second_process_gets_one_line_lock_error(db_path: Path) -> None:
    with Store(db_path):
        code = textwrap.dedent(
            f"""
            from promptlab.errors import DatabaseLockedError
            from promptlab.store import Store
            try:
                Store({str(db_path)!r})
            except DatabaseLockedError as exc:
                print(exc)
            """
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        assert str(db_path) in out and "in use by another process" in out and "PID" in out
        cli = subprocess.run(
            [sys.executable, "-m", "promptlab", "--db", str(db_path), "prompt", "list"],
            capture_output=True,
            text=True,
        )
    assert cli.returncode == 1
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: database ")
    assert "Traceback" not in cli.stderr


def test_lock_error_type() -> None:
    err = DatabaseLockedError("/x.duckdb", "python (PID 1)")
    assert "\n" not in str(err)


@pytest.mark.parametrize(
    ("make_path", "fragment"),
    [
        # the parent is a regular file
        (lambda tmp: tmp / "file" / "x.duckdb", "cannot create the folder"),
        (lambda tmp: tmp / "file" / "sub" / "x.duckdb", "cannot create the folder"),
        # a file that is not a DuckDB database
        (lambda tmp: tmp / "file", "not a valid DuckDB database file"),
    ],
)
def test_unusable_database_paths_are_one_line_store_errors(
    tmp_path: Path, make_path: Any, fragment: str
) -> None:
    (tmp_path / "file").write_text("not a database\n" * 100, encoding="utf-8")
    with pytest.raises(StoreError) as info:
        Store(make_path(tmp_path))
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert (tmp_path / "file").read_text(encoding="utf-8") == "not a database\n" * 100
