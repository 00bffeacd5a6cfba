"""One lifecycle (issue 58): a cancel racing a resume, a pause racing a cancel, and two
resumes, 0-20 ms apart on a real DuckDB file. Each race has one outcome the store and
the audit agree on: an accepted cancel is never lost (the run's next end after it is
`cancelled`), a run never ends twice without a resume between, and the store's final
status is the last end the audit recorded."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import EngineError
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store
from promptlab.store.audit import AuditLog
from promptlab.store.audit_filter import AuditFilter

TRIALS = 50
ROWS = 6
PATIENCE_S = 30.0


@pytest.fixture
def engine(db_path: Path, tmp_path: Path) -> Iterator[tuple[Engine, Store, ScriptedProvider]]:
    provider = ScriptedProvider()
    endpoint = EndpointConfig(name="quick", kind="openai", concurrency=1)
    with (
        Store(db_path) as store,
        Engine(store, endpoints={"quick": endpoint}, provider_factory=lambda _c: provider) as eng,
    ):
        yield eng, store, provider


def paused_run(eng: Engine, provider: ScriptedProvider, tmp_path: Path) -> str:
    """A run paused with its first item answered and the rest pending."""
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(ROWS)))
    spec = {
        "name": "raced",
        "dataset": str(dataset),
        "variants": [
            {
                "name": "v",
                "model": "quick:m",
                "params": {"max_tokens": 8},
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
            }
        ],
    }
    provider.hold_requests()
    run_id = eng.submit(parse_spec(spec))
    deadline = time.monotonic() + PATIENCE_S
    while provider.in_flight == 0:
        assert time.monotonic() < deadline, "nothing was sent"
        time.sleep(0.001)
    eng.pause(run_id)
    provider.release_requests()
    assert str(eng.wait(run_id, PATIENCE_S).status) == "paused"
    return run_id


def race(*calls: Callable[[], Any]) -> list[str]:
    """Each call on its own thread, each after a random 0-20 ms (one of them at once):
    'ok' or the refusal's text, in the order given."""
    delays = [random.uniform(0, 0.02) for _ in calls]
    delays[random.randrange(len(calls))] = 0.0
    start = threading.Barrier(len(calls))
    outcomes = [""] * len(calls)

    def go(i: int) -> None:
        start.wait()
        time.sleep(delays[i])
        try:
            calls[i]()
            outcomes[i] = "ok"
        except EngineError as exc:
            outcomes[i] = f"refused: {exc}"

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PATIENCE_S)
    return outcomes


def lifecycle(store: Store, run_id: str) -> list[tuple[str, str | None]]:
    """The run's lifecycle events in the changes chain, in order: (kind, end status)."""
    events = AuditLog(store).events(AuditFilter(run_id=run_id, limit=None))
    kinds = ("run.submitted", "run.resumed", "run.cancelled", "run.paused", "run.ended")
    return [
        (e.kind, e.payload.get("status") if e.kind == "run.ended" else None)
        for e in sorted(events, key=lambda e: (e.chain, e.seq))
        if e.chain == "changes" and e.kind in kinds
    ]


def agree(store: Store, eng: Engine, run_id: str) -> None:
    """The store's final status is the audit's last end; never two ends without a
    resume between; every cancel recorded is followed, before any resume, by a
    cancelled end."""
    steps = lifecycle(store, run_id)
    ends = [status for kind, status in steps if kind == "run.ended"]
    assert ends and str(eng.status(run_id).status) == ends[-1], steps
    between = [kind for kind, _ in steps if kind in ("run.ended", "run.resumed")]
    assert all(
        (a, b) != ("run.ended", "run.ended") for a, b in zip(between, between[1:], strict=False)
    ), f"two ends without a resume between: {steps}"
    for i, (kind, _) in enumerate(steps):
        if kind == "run.cancelled":
            after = [s for k, s in steps[i + 1 :] if k in ("run.ended", "run.resumed")]
            assert after[:1] == ["cancelled"], f"a cancel was lost: {steps}"


def settle(eng: Engine, run_id: str) -> None:
    eng.wait(run_id, PATIENCE_S)


def test_cancel_against_resume_has_one_outcome(
    engine: tuple[Engine, Store, ScriptedProvider], tmp_path: Path
) -> None:
    eng, store, provider = engine
    for _ in range(TRIALS):
        run_id = paused_run(eng, provider, tmp_path)
        outcomes = race(partial(eng.cancel, run_id), partial(eng.resume, run_id))
        settle(eng, run_id)
        assert outcomes[0] == "ok", outcomes  # a cancel is always taken
        agree(store, eng, run_id)
    assert AuditLog(store).verify(rows=False).ok


def test_pause_against_cancel_has_one_outcome(
    engine: tuple[Engine, Store, ScriptedProvider], tmp_path: Path
) -> None:
    eng, store, provider = engine
    for _ in range(TRIALS):
        run_id = paused_run(eng, provider, tmp_path)
        # Held before the resume: the resumed run stays running while raced (held after
        # it, the run could complete first, once in a few hundred trials).
        provider.hold_requests()
        eng.resume(run_id)
        outcomes = race(partial(eng.pause, run_id), partial(eng.cancel, run_id))
        provider.release_requests()
        settle(eng, run_id)
        assert outcomes[1] == "ok", outcomes
        agree(store, eng, run_id)
        assert str(eng.status(run_id).status) == "cancelled"
    assert AuditLog(store).verify(rows=False).ok


def test_two_resumes_start_one_run(
    engine: tuple[Engine, Store, ScriptedProvider], tmp_path: Path
) -> None:
    eng, store, provider = engine
    for _ in range(TRIALS):
        run_id = paused_run(eng, provider, tmp_path)
        outcomes = race(partial(eng.resume, run_id), partial(eng.resume, run_id))
        settle(eng, run_id)
        assert sorted(o[:7] for o in outcomes) == ["ok", "refused"], outcomes
        agree(store, eng, run_id)
        assert [k for k, _ in lifecycle(store, run_id)].count("run.resumed") == 1
        assert str(eng.status(run_id).status) == "completed"
    assert AuditLog(store).verify(rows=False).ok


def test_the_store_moves_a_run_only_along_the_lifecycle(
    engine: tuple[Engine, Store, ScriptedProvider], tmp_path: Path
) -> None:
    """Every status change is a compare-and-set along RUN_TRANSITIONS: a move the table
    does not allow is refused, naming both states, and records nothing."""
    from promptlab.records import RunStatus
    from promptlab.records.states import RUN_TRANSITIONS
    from promptlab.store import RunStore

    eng, store, provider = engine
    run_id = paused_run(eng, provider, tmp_path)
    eng.resume(run_id)
    assert str(eng.wait(run_id, PATIENCE_S).status) == "completed"
    runs = RunStore(store)
    before = runs.events(run_id)
    for status in RunStatus:
        assert status not in RUN_TRANSITIONS[RunStatus.COMPLETED]
        with pytest.raises(EngineError, match=f"is completed: it cannot become {status}"):
            runs.set_status(run_id, status)
    assert runs.events(run_id) == before
    assert str(runs.get_run(run_id).status) == "completed"
    with pytest.raises(EngineError, match="already running|is completed"):
        eng.resume(run_id)


def test_a_cancel_after_the_run_s_end_is_decided_records_nothing(
    db_path: Path, tmp_path: Path
) -> None:
    """The run's own end races a cancel too: held in its after-run work (its end decided:
    completed), a cancel finds it ended and records nothing. It was taken (`run.cancelled`
    recorded) and then lost: the run completed and the late cancel found it final."""
    in_hook, proceed = threading.Event(), threading.Event()

    def after_run(_end: Any) -> None:
        in_hook.set()
        proceed.wait(PATIENCE_S)

    provider = ScriptedProvider()
    endpoint = EndpointConfig(name="quick", kind="openai", concurrency=1)
    with (
        Store(db_path) as store,
        Engine(
            store,
            endpoints={"quick": endpoint},
            provider_factory=lambda _c: provider,
            on_run_ended=after_run,
        ) as eng,
    ):
        run_id = paused_run(eng, provider, tmp_path)
        eng.resume(run_id)
        assert in_hook.wait(PATIENCE_S), "the run did not end"
        eng.cancel(run_id)  # as its end is being recorded
        with pytest.raises(EngineError, match="nothing to pause"):
            eng.pause(run_id)
        proceed.set()
        settle(eng, run_id)
        agree(store, eng, run_id)
        assert str(eng.status(run_id).status) == "completed"
        assert "run.cancelled" not in [kind for kind, _ in lifecycle(store, run_id)]
