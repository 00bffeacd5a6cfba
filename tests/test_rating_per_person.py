"""A rating in the app counts once per person (issue 22): "Good" twice is one thumbs_up,
and a person's latest thumb replaces their earlier one."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from promptlab.audit.chain import CHANGES_CHAIN
from promptlab.config import Settings
from promptlab.store import Store
from promptlab.store.audit import AuditFilter
from promptlab.workbench import Workbench


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> Path:
    copy = tmp_path / "ratings.duckdb"
    shutil.copy(runs[0], copy)
    return copy


def workbench(db: Path, author: str) -> Workbench:
    settings = Settings.from_env({"PROMPTLAB_DB": str(db), "PROMPTLAB_AUTHOR": author})
    return Workbench(Store(db), settings)


@pytest.fixture
def wb(db: Path) -> Iterator[Workbench]:
    with workbench(db, "tester") as bench:
        yield bench


def first_key(wb: Workbench, run_id: str) -> tuple[str, str]:
    """(key, variant) of the run's first result."""
    with wb.store.read() as cur:
        row = cur.execute(
            "SELECT idempotency_key, variant FROM results WHERE run_id = ? ORDER BY seq LIMIT 1",
            [run_id],
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def thumbs(wb: Workbench, run_id: str, variant: str) -> tuple[int, int]:
    """(thumbs up, thumbs down) of a variant as the metrics count them."""
    row = next(m for m in wb.analysis.metrics(run_id=run_id) if m.variant == variant)
    return row.thumbs_up, row.thumbs_down


def rated_events(wb: Workbench) -> list[str]:
    events = wb.audit.events(AuditFilter(limit=None))
    return [
        str(e.payload["kind"])
        for e in events
        if e.chain == CHANGES_CHAIN and e.kind == "feedback.rated"
    ]


def test_good_twice_by_one_person_counts_once(wb: Workbench, runs: tuple[Path, str, str]) -> None:
    run_id = runs[1]
    key, variant = first_key(wb, run_id)
    before = thumbs(wb, run_id, variant)
    wb.analysis.rate_result(run_id, key, "thumbs_up")
    wb.analysis.rate_result(run_id, key, "thumbs_up")
    assert wb.analysis.result_feedback(run_id, key) == {"thumbs_up": 1}
    assert thumbs(wb, run_id, variant) == (before[0] + 1, before[1])
    assert rated_events(wb) == ["thumbs_up"]  # the repeat changed nothing
    with wb.store.read() as cur:
        sources = cur.execute(
            "SELECT source FROM feedback WHERE idempotency_key = ?", [key]
        ).fetchall()
    assert sources == [("app:tester",)]  # who rated


def test_a_persons_latest_thumb_replaces_their_earlier_one(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    run_id = runs[1]
    key, variant = first_key(wb, run_id)
    before = thumbs(wb, run_id, variant)
    wb.analysis.rate_result(run_id, key, "thumbs_up")
    wb.analysis.rate_result(run_id, key, "thumbs_down")
    assert wb.analysis.result_feedback(run_id, key) == {"thumbs_down": 1}
    assert thumbs(wb, run_id, variant) == (before[0], before[1] + 1)
    wb.analysis.rate_result(run_id, key, "thumbs_up")
    assert wb.analysis.result_feedback(run_id, key) == {"thumbs_up": 1}
    assert rated_events(wb) == ["thumbs_up", "thumbs_down", "thumbs_up"]


def test_each_person_counts_once(db: Path, runs: tuple[Path, str, str]) -> None:
    run_id = runs[1]
    for author in ("alice", "bob", "alice"):
        with workbench(db, author) as bench:
            key, variant = first_key(bench, run_id)
            bench.analysis.rate_result(run_id, key, "thumbs_up")
    with workbench(db, "carol") as bench:
        bench.analysis.rate_result(run_id, key, "thumbs_down")
        assert bench.analysis.result_feedback(run_id, key) == {"thumbs_up": 2, "thumbs_down": 1}
        # Clicks stay events: each one counts (with the impression it needs).
        bench.analysis.rate_result(run_id, key, "click")
        bench.analysis.rate_result(run_id, key, "click")
        assert bench.analysis.result_feedback(run_id, key)["click"] == 2
