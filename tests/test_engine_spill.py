"""Spill files: redacted, private to their owner, and never taken from someone else."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from promptlab.engine.record.spill import read_spill, spill_batch, spill_dirs, spilled_files
from promptlab.records import FinalRow, WriteBatch

KEY = "sk-spill-0123456789abcdef"


def final(text: str) -> FinalRow:
    return FinalRow(
        key="k" * 32,
        run_id="run_x",
        seq=0,
        row_index=0,
        variant="v",
        repeat=0,
        status="succeeded",
        prompt_version_id="pv",
        endpoint="e",
        model="m",
        params={},
        attempts=1,
        finished_at=datetime(2030, 1, 1, tzinfo=UTC),
        output_text=text,
    )


def test_a_spill_is_redacted_private_and_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPILL_TEST_KEY", KEY)
    path = spill_batch(WriteBatch(finals=[final(f"echo {KEY}")]), tmp_path / "spill")
    assert KEY not in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_spill(path).finals[0].output_text == "echo [redacted]"


def test_the_temp_folder_is_per_user(tmp_path: Path) -> None:
    assert f"promptlab-unsaved-{os.getuid()}" in str(spill_dirs(tmp_path / "db.duckdb")[1])


def test_files_planted_by_another_user_or_as_symlinks_are_not_ingested(tmp_path: Path) -> None:
    folder = tmp_path / "spill"
    mine = spill_batch(WriteBatch(finals=[final("mine")]), folder)
    (folder / "link.jsonl").symlink_to(mine)
    planted = folder / "planted.jsonl"
    planted.write_text(mine.read_text())
    if os.geteuid() == 0:
        os.chown(planted, 65534, 65534)  # as root: make it someone else's
    else:
        planted.unlink()
    assert spilled_files((folder,)) == [mine]
