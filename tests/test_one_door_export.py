"""One door for `promptlab export` (issue 37): through a server the table is written
there, streamed, and written to this shell's file; the output is the same."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.one_door_helpers import assert_same_both_ways


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> Path:
    copy = tmp_path / "runs.duckdb"
    shutil.copyfile(runs[0], copy)
    return copy


def test_export_prints_the_same_through_a_server_and_writes_here(
    db: Path, runs: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    changing = [
        # Each pass writes the same files here: the first replaces, the second is refused.
        [
            "export",
            "--run",
            "{run}",
            "--table",
            "results",
            "--format",
            "csv",
            "-o",
            "{out}.csv",
            "--force",
        ],
        ["export", "--run", "{run}", "--table", "results", "--format", "csv", "-o", "{out}.csv"],
        [
            "export",
            "--run",
            "{run}",
            "--table",
            "items",
            "--format",
            "jsonl",
            "-o",
            "{out}.jsonl",
            "--force",
        ],
        [
            "export",
            "--experiment",
            "triage-split",
            "--table",
            "comparisons",
            "--format",
            "parquet",
            "-o",
            "{out}.parquet",
            "--force",
        ],
        [
            "export",
            "--run",
            "run_nope",
            "--table",
            "results",
            "--format",
            "csv",
            "-o",
            "{out}-none.csv",
        ],
        ["export", "--table", "secrets", "--format", "csv", "-o", "{out}-x.csv"],
        ["export", "--run", "{run}", "--format", "xlsx", "-o", "{out}.xlsx"],
        [
            "export",
            "--run",
            "{run}",
            "--table",
            "results",
            "--format",
            "csv",
            "-o",
            "{out}.csv",
            "--force",
            "--raw",
        ],
    ]
    routes = assert_same_both_ways(
        db, tmp_path, monkeypatch, changing=changing, values={"run": runs[1], "out": str(out)}
    )
    assert "POST /v1/jobs/table-exports" in routes
    assert not (tmp_path / "out-none.csv").exists()
    assert (tmp_path / "out.parquet").stat().st_size > 0
