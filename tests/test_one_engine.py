"""One engine per workbench: the app's browser sessions (threads) share it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from pytest import MonkeyPatch

from promptlab.engine import Engine
from promptlab.workbench import Workbench
from tests.fakellm_fixtures import ServerFactory

THREADS = 8


def test_threads_asking_at_once_get_one_engine(db_path: object) -> None:
    with Workbench.open() as wb:
        start = threading.Barrier(THREADS)

        def first_use() -> Engine:
            start.wait()  # every thread asks at the same moment
            return wb.engine

        with ThreadPoolExecutor(THREADS) as pool:
            engines = list(pool.map(lambda _i: first_use(), range(THREADS)))
        assert len({id(engine) for engine in engines}) == 1
        assert wb.engine is engines[0]


def test_app_sessions_opening_at_once_get_one_workbench(db_path: Path) -> None:
    """The app's registry (promptlab/ui/resources.py), not a Streamlit cache: browser
    sessions (threads) asking at once open the database once."""
    from promptlab.ui import resources

    start = threading.Barrier(THREADS)

    def first_page_load() -> Workbench:
        start.wait()
        return resources.get_workbench()

    with ThreadPoolExecutor(THREADS) as pool:
        workbenches = list(pool.map(lambda _i: first_page_load(), range(THREADS)))
    assert len({id(wb) for wb in workbenches}) == 1
    assert resources.open_workbenches() == workbenches[:1]


ROWS = 40
#: The endpoint's concurrency: one budget means the server never sees more at once.
ENDPOINT_CONCURRENCY = 3


def _spec_text(name: str, dataset: Path, base_url: str) -> str:
    return yaml.safe_dump(
        {
            "name": name,
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "only",
                    "messages": [{"role": "user", "content": "Summarize: {{ text }}"}],
                    "model": "fake:gpt-4o-mini",
                    "params": {"max_tokens": 16},
                }
            ],
            "endpoints": {
                "fake": {
                    "kind": "openai",
                    "base_url": base_url,
                    "concurrency": ENDPOINT_CONCURRENCY,
                }
            },
        }
    )


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


#: Answers the server gives before the cancels, and between the cancels and the close.
FIRST_ANSWERS = 20
MORE_ANSWERS = 12
#: Bound for each step: generous for a loaded machine (each waits on a condition).
STEP_S = 120.0


def test_runs_started_from_many_threads_share_one_budget_and_lose_nothing_at_close(
    db_path: Path, tmp_path: Path, fakellm_factory: ServerFactory, monkeypatch: MonkeyPatch
) -> None:
    # The server is stepped, not raced: it answers the requests numbered below its gate
    # and holds the rest in flight, so each step below ends with exactly so many answers
    # given and ENDPOINT_CONCURRENCY requests held, however slow the machine.
    server = fakellm_factory(latency_ms=30)
    server.gate(FIRST_ANSWERS)
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(ROWS)))

    def answered_and_held(answers: int) -> Callable[[], bool]:
        def check() -> bool:
            stats = server.stats()
            return stats["successes"] == answers and stats["held"] == ENDPOINT_CONCURRENCY

        return check

    with Workbench.open() as wb:
        start = threading.Barrier(THREADS)

        def launch(i: int) -> tuple[str, Engine]:
            path = tmp_path / f"r{i}.yaml"
            path.write_text(_spec_text(f"r{i}", dataset, server.openai_base_url))
            spec = wb.runs.load_spec(path)
            start.wait()  # every session presses Start at the same moment
            return wb.runs.start(spec), wb.engine

        with ThreadPoolExecutor(THREADS) as pool:
            started = list(pool.map(launch, range(THREADS)))
        run_ids = [run_id for run_id, _engine in started]
        assert len({id(engine) for _run, engine in started}) == 1

        # Half the runs are cancelled from as many threads while requests are in flight.
        _until(answered_and_held(FIRST_ANSWERS), "first answers", STEP_S)
        doomed, survivors = run_ids[: THREADS // 2], run_ids[THREADS // 2 :]
        with ThreadPoolExecutor(len(doomed)) as pool:
            list(pool.map(wb.runs.cancel, doomed))
        # The held requests are answered (a cancelled run's in-flight requests finish),
        # and a few more of the survivors'; their next ones are held again.
        more = FIRST_ANSWERS + ENDPOINT_CONCURRENCY + MORE_ANSWERS
        server.gate(more)
        at_cancel = {run_id: wb.runs.wait(run_id, STEP_S) for run_id in doomed}
        assert {p.status for p in at_cancel.values()} == {"cancelled"}
        _until(answered_and_held(more), "more answers", STEP_S)

        # The others are cut short by closing the workbench with requests in flight,
        # answered only once the close has stopped every run: answers arriving while it
        # closes must be stored too. (A survivor cannot have completed: fewer answers
        # than its ROWS went out.)
        engine = wb.engine
        cancel, cancelled = engine.cancel, []

        def cancel_then_answer(run_id: str) -> None:
            cancel(run_id)
            cancelled.append(run_id)
            if set(survivors) <= set(cancelled):
                server.gate(None)

        monkeypatch.setattr(engine, "cancel", cancel_then_answer)
    stats = server.stats()
    assert stats["max_in_flight"] <= ENDPOINT_CONCURRENCY  # one budget, not one per run
    assert stats["successes"] == more + ENDPOINT_CONCURRENCY  # the held ones, answered

    with Workbench.open() as wb:
        after = {run_id: wb.runs.progress(run_id) for run_id in run_ids}
        for run_id in doomed:  # the cancel stuck: nothing ran or was written over it
            assert after[run_id].status == "cancelled"
            assert after[run_id].succeeded == at_cancel[run_id].succeeded
        # Every answer the server gave is stored, once: none was held and dropped.
        assert sum(p.succeeded for p in after.values()) == stats["successes"]
        for p in after.values():
            assert p.succeeded + p.failed + p.cancelled + p.pending == ROWS
            assert p.in_flight == 0
        # A survivor resumed later sends only what it never got an answer for.
        resumed = wb.runs.resume(survivors[0])
        final = wb.runs.wait(resumed, STEP_S)
    assert final.status == "completed" and final.succeeded == ROWS
    assert server.stats()["completed_twice"] == 0
