"""Rotating backups by the owner (issue 59, item 1): `promptlab serve --backup-every
--backup-keep` (or PROMPTLAB_BACKUP_EVERY / _KEEP / _DIR for the app serving the API)
takes a consistent copy while a run writes, keeps the newest N, and every copy restores
and verifies."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.config import Settings
from promptlab.errors import ConfigError
from promptlab.server.backup_watch import BackupWatch, backup_name
from promptlab.server.run import Serving
from promptlab.workbench import Workbench
from tests.fakellm_fixtures import ServerFactory
from tests.test_distributed import spec_data


def test_the_period_and_count_are_read_or_refused_in_one_line() -> None:
    settings = Settings.from_env({"PROMPTLAB_BACKUP_EVERY": "1h", "PROMPTLAB_BACKUP_KEEP": "48"})
    assert (settings.backup_every_s, settings.backup_keep) == (3600.0, 48)
    assert Settings.from_env({"PROMPTLAB_BACKUP_EVERY": "90s"}).backup_every_s == 90.0
    assert Settings.from_env({}).backup_every_s is None
    for bad in ("0s", "1 hour", "-5m", "1.5h"):
        with pytest.raises(ConfigError, match=f"PROMPTLAB_BACKUP_EVERY: .*got '{bad}'"):
            Settings.from_env({"PROMPTLAB_BACKUP_EVERY": bad})
    with pytest.raises(ConfigError, match="PROMPTLAB_BACKUP_KEEP"):
        Settings.from_env({"PROMPTLAB_BACKUP_EVERY": "1h", "PROMPTLAB_BACKUP_KEEP": "0"})


def test_names_sort_as_times_and_never_collide() -> None:
    now = datetime(2026, 12, 7, 18, 0, 0, tzinfo=UTC)
    first = backup_name(now, set())
    assert first == "promptlab-20261207T180000Z.duckdb"
    assert backup_name(now, {first}) == "promptlab-20261207T180000Z-2.duckdb"


def test_the_owner_keeps_the_newest_copies_each_restoring_and_verifying(
    tmp_path: Path, fakellm_factory: ServerFactory, db_path: Path
) -> None:
    server = fakellm_factory(latency_ms=20)
    folder = tmp_path / "copies"
    keep_me = folder / "notes.txt"  # not a backup: never deleted
    folder.mkdir()
    keep_me.write_text("mine")
    settings = replace(Settings.from_env(), backup_every_s=1.0, backup_keep=2, backup_dir=folder)
    with Workbench.open(settings) as wb:
        serving = Serving(wb, "127.0.0.1", 0)
        assert isinstance(serving.backups, BackupWatch)
        serving.start()
        try:
            spec = spec_data(server, 300, tmp_path)
            del spec["executor"]
            run_id = wb.runs.start(wb.runs.spec_from_data(spec))
            deadline = time.monotonic() + 120
            while serving.backups.taken < 4:  # several, some while the run writes
                assert time.monotonic() < deadline, "no backups taken"
                time.sleep(0.1)
            wb.runs.wait(run_id, timeout=120)
        finally:
            serving.stop()
    copies = serving.backups.backups()
    assert len(copies) == 2 and keep_me.exists()
    for copy in copies:
        with duckdb.connect(str(copy), read_only=True) as conn:
            (runs,) = conn.execute("SELECT count(*) FROM runs").fetchone() or (0,)
        assert runs >= 1
        verified = CliRunner().invoke(main, ["--db", str(copy), "audit", "verify"])
        assert verified.exit_code == 0, verified.output


def test_serve_takes_the_options(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        main, ["--db", str(tmp_path / "x.duckdb"), "serve", "--backup-every", "soon"]
    )
    assert out.exit_code != 0
    assert "--backup-every: expected a period like 90s, 30m, 1h or 1d, got 'soon'" in out.output
