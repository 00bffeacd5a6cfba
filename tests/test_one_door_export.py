"""One door for `promptlab export` (issue 37): through a server the table is written
there, streamed, and written to this shell's file; the output is the same."""

from __future__ import annotations

import json
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
    # The Runs page's item filters, as its downloads apply them (issue 61); without
    # --run, or on a table without items, refused before anything is written.
    filtered = ["export", "--run", "{run}", "--format", "csv", "--force"]
    changing += [
        [*filtered, "--table", "items", "--variant", "staging", "-o", "{out}-staging.csv"],
        [*filtered, "--table", "results", "--status", "succeeded", "-o", "{out}-ok.csv"],
        ["export", "--table", "items", "--variant", "staging", "-o", "{out}-x.csv"],
        [*filtered, "--table", "metrics", "--variant", "staging", "-o", "{out}-x.csv"],
    ]
    routes = assert_same_both_ways(
        db, tmp_path, monkeypatch, changing=changing, values={"run": runs[1], "out": str(out)}
    )
    assert "POST /v1/jobs/table-exports" in routes
    assert not (tmp_path / "out-none.csv").exists()
    assert not (tmp_path / "out-x.csv").exists()
    assert (tmp_path / "out.parquet").stat().st_size > 0
    kept = (tmp_path / "out-staging.csv").read_text().splitlines()
    variant = kept[0].split(",").index("variant")
    assert len(kept) > 1 and {line.split(",")[variant] for line in kept[1:]} == {"staging"}


def test_the_export_route_takes_the_runs_page_filters(
    db: Path, runs: tuple[Path, str, str]
) -> None:
    from promptlab.config import Settings
    from promptlab.records.items import ItemFilter
    from promptlab.workbench import Workbench
    from tests.test_server import Served

    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        staging = wb.runs.items(runs[1], variant="staging", limit=1000).total
    server = Served(db)
    try:
        status, text = server.call(
            "GET", f"/v1/exports/items?run_id={runs[1]}&format=jsonl&variant=staging"
        )
        refused, why = server.call("GET", "/v1/exports/items?format=jsonl&variant=staging")
    finally:
        server.stop()
    assert status == 200, text
    rows = [json.loads(line) for line in str(text).splitlines()]
    assert len(rows) == staging > 0 and {r["variant"] for r in rows} == {"staging"}
    assert refused >= 400 and "give --run" in str(why)
    assert ItemFilter(variant="staging").describe() == "variant staging"
