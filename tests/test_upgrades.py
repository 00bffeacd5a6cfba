"""Upgrades you can undo (issue 59): a database an older promptlab made is copied beside
itself before it is migrated, and the log says from, to and where the copy is; one a
newer promptlab made is refused in one line naming both migrations."""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb
import pytest

from promptlab.errors import StoreError
from promptlab.store import Store
from promptlab.store.migrations import MIGRATIONS, apply_migrations

pytestmark = pytest.mark.no_database


def test_an_older_database_is_copied_before_it_is_migrated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "old.duckdb"
    with duckdb.connect(str(db)) as conn:
        apply_migrations(conn, MIGRATIONS[:-1])  # as the release before this one left it
        conn.execute("INSERT INTO prompts VALUES ('kept', 'made before the upgrade', now())")
    with caplog.at_level(logging.WARNING), Store(db):
        pass
    last, newest = MIGRATIONS[-2].name, MIGRATIONS[-1].name
    copy = tmp_path / f"old.duckdb.before-{newest}"
    assert f"migrating from {last} to {newest}; a copy of it as it was is {copy}" in caplog.text
    with duckdb.connect(str(copy), read_only=True) as conn:
        names = [
            r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY name").fetchall()
        ]
        assert names == [m.name for m in MIGRATIONS[:-1]]
        assert conn.execute("SELECT name FROM prompts").fetchall() == [("kept",)]
    with duckdb.connect(str(db), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM _migrations").fetchone() == (len(MIGRATIONS),)
    caplog.clear()
    with caplog.at_level(logging.WARNING), Store(db):  # up to date: nothing copied or said
        pass
    assert "migrating" not in caplog.text


def test_a_database_a_newer_promptlab_made_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "new.duckdb"
    with duckdb.connect(str(db)) as conn:
        apply_migrations(conn)
        conn.execute("INSERT INTO _migrations VALUES ('0999_from_the_future', now())")
    with pytest.raises(StoreError) as refused:
        Store(db)
    assert str(refused.value) == (
        "the database was made by a newer promptlab (its migration 0999_from_the_future is "
        f"unknown here; this one knows up to {MIGRATIONS[-1].name}): upgrade promptlab, or "
        "open a backup made before"
    )
    duckdb.connect(str(db)).close()  # the refused open let go of the file
