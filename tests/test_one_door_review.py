"""One door for `promptlab review ...` (issue 37): through a server each command calls
the typed `/v1/review/...` routes and prints exactly what it prints on its own; an
export is written by the server, streamed, and written here."""

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


def test_review_commands_print_the_same_through_a_server(
    db: Path, runs: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    changing = [
        ["review", "list"],
        ["review", "add", "{run}", "1", "2", "3", "--reason", "=1+1 sent by hand"],
        ["review", "add", "{run}", "1"],  # already queued: nothing new
        ["review", "add", "{run}", "0"],  # rows are numbered from 1: refused
        ["review", "add", "run_nope", "1"],
        ["review", "list", "--status", "all", "--run", "{run}"],
        ["review", "show", "1"],
        ["review", "show", "999"],
        ["review", "accept", "1", "--note", "fine"],
        ["review", "correct", "2", '=HYPERLINK("x")', "--expect-version", "0"],
        ["review", "reject", "3"],
        ["review", "accept", "1"],  # settled: refused, naming who and when
        ["review", "reopen", "1", "--expect-version", "0"],  # stale: refused
        ["review", "reopen", "1", "--expect-version", "1"],
        ["review", "list", "--status", "all"],
        ["review", "export", "{out}.csv", "--force", "--raw"],
        ["review", "export", "{out}.jsonl", "--force", "--column", "answer"],
        ["review", "export", "{out}.csv", "--force"],
        ["review", "export", "{out}.txt", "--force"],
        ["review", "export", "{out}.csv"],  # exists: refused here, as on its own
    ]
    out = tmp_path / "expected"
    routes = assert_same_both_ways(
        db,
        tmp_path,
        monkeypatch,
        changing=changing,
        values={"run": runs[1], "out": str(out)},
    )
    assert {"POST /v1/review/add", "POST /v1/jobs/review-exports"} <= set(routes)
    assert "POST /v1/review/items/1/reopen" in routes
    # The served pass wrote the last files here; a formula is shown, not run.
    assert "'=HYPERLINK" in (tmp_path / "expected.csv").read_text()
