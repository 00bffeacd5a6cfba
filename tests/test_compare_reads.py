"""The Compare page's reads on real runs: side-by-side pages, time buckets, runs with results.

A split and an all-mode run of the demo experiment on the simulated model (conftest's
`runs`, made once per session); each read is checked against the stored results.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from promptlab.config import Settings
from promptlab.errors import PromptlabError
from promptlab.store import Store
from promptlab.workbench import Workbench


def settings(path: Path) -> Settings:
    return Settings.from_env({"PROMPTLAB_DB": str(path), "PROMPTLAB_AUTHOR": "tester"})


@pytest.fixture
def wb(runs: tuple[Path, str, str], tmp_path: Path) -> Iterator[Workbench]:
    # A copy: the session's database is shared by every test that reads these runs.
    db = tmp_path / "compare.duckdb"
    shutil.copyfile(runs[0], db)
    with Store(db) as store, Workbench(store, settings(db)) as bench:
        yield bench


def stored(wb: Workbench, run_id: str) -> dict[tuple[int, int, str], str | None]:
    with wb.store.read() as cur:
        rows = cur.execute(
            "SELECT row_index, repeat, variant, output_text FROM results WHERE run_id = ?",
            [run_id],
        ).fetchall()
    return {(r[0], r[1], r[2]): r[3] for r in rows}


def test_runs_with_results_are_newest_first_with_their_variants(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    _, split, paired = runs
    assert wb.analysis.has_results()
    listed = wb.analysis.runs_with_results()
    assert [r.run_id for r in listed] == [paired, split]
    assert all(r.variants == ["control", "staging"] for r in listed)
    assert [r.results for r in listed] == [len(stored(wb, paired)), len(stored(wb, split))]
    assert [r.run_id for r in wb.analysis.runs_with_results(limit=1)] == [paired]


def test_side_by_side_pages_through_every_input_of_an_all_mode_run(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    paired = runs[2]
    outputs = stored(wb, paired)
    inputs = sorted({(row, repeat) for row, repeat, _ in outputs})
    first = wb.analysis.side_by_side(paired, offset=0, limit=15)
    assert first.total == len(inputs) == 40
    assert first.variants == ["control", "staging"]
    seen = list(first.rows)
    offset = 15
    while offset < first.total:
        seen += wb.analysis.side_by_side(paired, offset=offset, limit=15).rows
        offset += 15
    assert [(r.row_index, r.repeat) for r in seen] == inputs
    for row in seen:
        assert [o.variant for o in row.outputs] == ["control", "staging"]
        for o in row.outputs:
            assert o.output_text == outputs[(row.row_index, row.repeat, o.variant)]


def test_only_different_keeps_the_inputs_whose_outputs_differ(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    paired = runs[2]
    every = wb.analysis.side_by_side(paired, limit=100).rows
    different = wb.analysis.side_by_side(paired, limit=100, only_different=True)
    assert [(r.row_index, r.repeat) for r in different.rows] == [
        (r.row_index, r.repeat) for r in every if r.differs
    ]
    assert different.total == len(different.rows) > 0


def test_a_split_run_has_nothing_side_by_side_and_bad_pages_are_refused(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    page = wb.analysis.side_by_side(runs[1])
    assert page.total == 0 and page.rows == []
    with pytest.raises(PromptlabError, match="offset must be >= 0 and limit >= 1"):
        wb.analysis.side_by_side(runs[2], offset=-1)
    with pytest.raises(PromptlabError, match="limit=0"):
        wb.analysis.side_by_side(runs[2], limit=0)
    with pytest.raises(PromptlabError, match="no run with id 'run_missing'"):
        wb.analysis.side_by_side("run_missing")


def test_time_buckets_add_up_to_the_run_metrics(wb: Workbench, runs: tuple[Path, str, str]) -> None:
    for run_id in runs[1:]:
        series = wb.analysis.metrics_over_time(run_id)
        assert series.unit == "second"  # a sim run of a few seconds
        assert series.buckets == sorted(series.buckets, key=lambda b: b.start)
        for row in wb.analysis.metrics(run_id=run_id):
            mine = [b for b in series.buckets if b.variant == row.variant]
            assert sum(b.finished for b in mine) == row.finished
            assert sum(b.completed for b in mine) == row.completed
            assert all(b.latency_p90_ms is None or b.latency_p90_ms > 0 for b in mine)


def test_latencies_are_the_variants_succeeded_results(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    run_id = runs[1]
    for row in wb.analysis.metrics(run_id=run_id):
        values = wb.analysis.latencies(run_id, row.variant or "")
        assert values.size == row.succeeded
