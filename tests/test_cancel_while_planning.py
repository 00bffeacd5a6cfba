"""A cancel sent while a run is still being planned stops the planning where it is
(issue 60: a 2-million-item plan went on for about 2 minutes after it), ends the run
cancelled with what was planned cancelled, and a resume plans it anew and completes."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from promptlab.config import Settings
from promptlab.engine.plan import planner, prepare
from promptlab.engine.plan.prepare import PreparedRun
from promptlab.workbench import Workbench

PATIENCE_S = 60.0
ROWS = 300
CHUNK = 100


def test_a_cancel_stops_planning_where_it_is_and_a_resume_plans_anew(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small chunks, looked at often: three chunks, the planner held after the first
    # until the cancel was sent, so the cancel lands while the plan is half done.
    monkeypatch.setattr(
        prepare, "plan_items", functools.partial(planner.plan_items, chunk_rows=CHUNK)
    )
    monkeypatch.setattr(planner, "STOP_EVERY_ROWS", 10)
    cancelled = threading.Event()
    real = PreparedRun.plan

    def held(
        self: PreparedRun, run_id: str, stop: Callable[[], bool] | None = None
    ) -> Iterator[planner.PlannedChunk]:
        chunks = real(self, run_id, stop) if stop is not None else real(self, run_id)
        yield next(chunks)
        cancelled.wait(PATIENCE_S)
        yield from chunks

    monkeypatch.setattr(PreparedRun, "plan", held)
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(ROWS)))
    spec = {
        "name": "planned",
        "dataset": str(dataset),
        "variants": [
            {
                "name": "v",
                "model": "sim:fast",
                "params": {"max_tokens": 8},
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
            }
        ],
    }
    with Workbench.open(Settings.from_env()) as wb:
        run_id = wb.runs.start(wb.runs.spec_from_data(spec))
        deadline = time.monotonic() + PATIENCE_S
        while (wb.runs.view(run_id).run.total_items or 0) < CHUNK:  # the first chunk is stored
            assert time.monotonic() < deadline
            time.sleep(0.01)
        try:
            wb.runs.cancel(run_id)
        finally:
            cancelled.set()
        ended = wb.runs.wait(run_id, PATIENCE_S)
        assert str(ended.status) == "cancelled", ended
        assert "being planned" in str(ended.reason)
        with wb.store.read() as cur:
            (planned,) = cur.execute(
                "SELECT count(*) FROM items WHERE run_id = ?", [run_id]
            ).fetchone() or (0,)
        assert planned < ROWS  # it stopped where it was, not at the plan's end
        monkeypatch.setattr(PreparedRun, "plan", real)
        wb.runs.resume(run_id)
        done = wb.runs.wait(run_id, PATIENCE_S * 2)
    assert str(done.status) == "completed", done
    with duckdb.connect(str(db_path), read_only=True) as conn:
        counts = conn.execute(
            "SELECT count(*), count(DISTINCT row_index) FROM results WHERE run_id = ? "
            "AND status = 'succeeded'",
            [run_id],
        ).fetchone()
    assert counts == (ROWS, ROWS)
