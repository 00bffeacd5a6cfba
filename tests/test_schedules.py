"""Schedules: a spec with `schedule:` is submitted by the owner's scheduler when due, in
`after:` order with the schedules due with it; pause, resume and remove; a firing that
cannot submit says why and the schedule goes on; the CLI's `promptlab schedule`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.config import Settings
from promptlab.engine.testing import ManualClock
from promptlab.errors import ScheduleNotFoundError, SpecError
from promptlab.records import RunStatus
from promptlab.schedules.cron import check_cron
from promptlab.schedules.scheduler import Scheduler
from promptlab.store import RunStore, Store
from promptlab.workbench import Workbench


def spec_data(tmp_path: Path, name: str, **extra: Any) -> dict[str, Any]:
    rows = tmp_path / "rows.csv"
    rows.write_text("text\nfirst\nsecond\n")
    return {
        "name": name,
        "dataset": str(rows),
        "variants": [
            {"messages": [{"role": "user", "content": "Say: {{ text }}"}], "model": "sim:fast"}
        ],
        **extra,
    }


@pytest.fixture
def wb(db_path: Path) -> Iterator[Workbench]:
    with Workbench.open(Settings.from_env()) as opened:
        yield opened


def _until(condition: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("schedule", "0 0 30 2 *", "never fires"),
        ("schedule", "0 2 * * * *", "not five fields"),
        ("schedule", "61 * * * *", "not a valid cron expression"),
        ("schedule", "x" * 500, "at most 120 characters"),
        ("after", [""], "expected a list of run names"),
        ("after", [f"r{i}" for i in range(21)], "at most 20 runs"),
    ],
)
def test_a_bad_schedule_or_after_is_refused_naming_the_field(
    tmp_path: Path, wb: Workbench, field: str, value: Any, message: str
) -> None:
    with pytest.raises(SpecError, match=message) as caught:
        wb.runs.spec_from_data(spec_data(tmp_path, "x", **{field: value}))
    assert str(caught.value).startswith(f"{field}:")
    assert check_cron(" @daily ") == "@daily"


def test_the_scheduler_submits_a_nightly_schedule_when_it_falls_due(
    tmp_path: Path, db_path: Path
) -> None:
    # A clock moved by hand: however slow the machine, it is 01:59:59 until the test
    # says otherwise, so the schedule's time and the firing do not race the wall clock.
    clock = ManualClock(datetime(2026, 12, 2, 1, 59, 59, tzinfo=UTC))
    with Workbench(Store(db_path, clock), Settings.from_env(), owns_store=True) as wb:
        spec = wb.runs.spec_from_data(spec_data(tmp_path, "nightly", schedule="0 2 * * *"))
        added = wb.schedules.add(spec)
        assert added.next_at == datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
        scheduler = Scheduler(wb.schedules, clock).start()
        try:
            # It looked, found nothing due, and sleeps until 2:00: nothing submitted yet.
            _until(lambda: scheduler.sleeping_until == added.next_at)
            assert wb.schedules.get("nightly").last_run_id is None and wb.runs.list() == []
            clock.advance(1)  # 2:00; its sleep (one real second) ends and it looks again
            _until(lambda: wb.schedules.get("nightly").last_run_id is not None)
        finally:
            scheduler.stop()
        fired = wb.schedules.get("nightly")
        assert fired.next_at == datetime(2026, 12, 3, 2, 0, tzinfo=UTC)
        assert fired.last_error is None
        run = wb.runs.wait(str(fired.last_run_id), timeout=60)
        assert (run.name, run.status, run.succeeded) == ("nightly", RunStatus.COMPLETED, 2)
        assert [r.run.run_id for r in wb.runs.list()] == [fired.last_run_id]  # fired once


class _CountedFirings:
    """A Firing with nothing ever due that counts the scheduler's looks."""

    def __init__(self) -> None:
        self.looks = 0

    def fire_due(self, now: datetime | None = None) -> object:
        self.looks += 1
        return []

    def next_due(self) -> datetime | None:
        return None  # nothing due: the scheduler sleeps its longest

    def on_change(self, listener: Any) -> None:
        pass


def test_a_stop_that_comes_while_the_scheduler_wakes_ends_it_at_once() -> None:
    firings = _CountedFirings()
    scheduler = Scheduler(firings, ManualClock())
    stop_now = threading.Event()

    class _StoppedWhileClearing(threading.Event):
        # stop() lands between the loop's look at `_stopping` and its clear(): the
        # wake-up it sets is cleared, which the old loop missed and slept MAX_SLEEP_S.
        def clear(self) -> None:
            if stop_now.is_set():
                scheduler._stopping = True
                self.set()
            super().clear()

    scheduler._wake = _StoppedWhileClearing()
    scheduler.start()
    _until(lambda: firings.looks == 1)
    stop_now.set()
    scheduler.wake()
    assert scheduler._thread is not None
    scheduler._thread.join(30)
    assert not scheduler._thread.is_alive() and firings.looks == 1  # no look after the stop


def test_schedules_due_together_fire_in_after_order_and_the_later_one_waits(
    tmp_path: Path, wb: Workbench
) -> None:
    # Added in the wrong order on purpose: `report` comes after `prep`.
    report = spec_data(tmp_path, "report", schedule="0 2 * * *", after=["prep"])
    prep = spec_data(tmp_path, "prep", schedule="0 2 * * *")
    wb.runs.start(wb.runs.spec_from_data({k: v for k, v in prep.items() if k != "schedule"}))
    for data in (report, prep):
        wb.schedules.add(wb.runs.spec_from_data(data))
    fired = wb.schedules.fire_due(datetime.now(UTC) + timedelta(days=1))
    assert [f.name for f in fired] == ["prep", "report"] and all(f.error is None for f in fired)
    runs = RunStore(wb.store)
    dependency = runs.dependencies(str(fired[1].run_id))
    assert [(d.name, d.run_id) for d in dependency] == [("prep", fired[0].run_id)]
    for f in fired:
        _until(lambda f=f: wb.runs.progress(str(f.run_id)).status == RunStatus.COMPLETED)
    assert wb.schedules.fire_due(datetime.now(UTC)) == []  # each fires once per time


def test_pause_resume_and_remove_are_audited_and_a_paused_schedule_does_not_fire(
    tmp_path: Path, wb: Workbench
) -> None:
    woken: list[int] = []
    wb.schedules.on_change(lambda: woken.append(1))  # the scheduler's wake-up
    wb.schedules.add(wb.runs.spec_from_data(spec_data(tmp_path, "hourly", schedule="@hourly")))
    paused = wb.schedules.pause("hourly")
    assert paused.paused and paused.next_at is None and wb.schedules.next_due() is None
    assert wb.schedules.fire_due(datetime.now(UTC) + timedelta(days=2)) == []
    before = datetime.now(UTC)  # read before: an hour may turn between resume and a read
    resumed = wb.schedules.resume("hourly")
    assert resumed.next_at is not None and resumed.next_at > before
    assert wb.schedules.next_due() == resumed.next_at
    wb.schedules.remove("hourly")
    assert wb.schedules.list() == [] and len(woken) == 4
    with pytest.raises(ScheduleNotFoundError, match="no schedule named 'hourly'"):
        wb.schedules.pause("hourly")
    kinds = [e.kind for e in wb.audit.events() if e.kind.startswith("schedule.")]
    assert sorted(kinds) == sorted(
        ["schedule.added", "schedule.paused", "schedule.resumed", "schedule.removed"]
    )


def test_a_firing_that_cannot_submit_says_why_and_the_schedule_goes_on(
    tmp_path: Path, wb: Workbench
) -> None:
    wb.schedules.add(wb.runs.spec_from_data(spec_data(tmp_path, "daily", schedule="@daily")))
    (tmp_path / "rows.csv").unlink()
    later = datetime.now(UTC) + timedelta(days=1)
    (fired,) = wb.schedules.fire_due(later)
    assert fired.run_id is None and fired.error is not None and "rows.csv" in fired.error
    after = wb.schedules.get("daily")
    assert after.last_error == fired.error and after.next_at is not None
    assert after.next_at > later


def test_the_schedule_command_adds_lists_pauses_resumes_and_removes(
    tmp_path: Path, db_path: Path
) -> None:
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(spec_data(tmp_path, "nightly", schedule="0 2 * * *")))
    cli = CliRunner()
    added = cli.invoke(main, ["schedule", "add", str(path)])
    assert added.exit_code == 0, added.output
    assert "scheduled nightly (0 2 * * *, UTC): next run at" in added.stdout
    listed = cli.invoke(main, ["schedule", "list"])
    assert "nightly  0 2 * * *  active  next" in listed.stdout and "never run" in listed.stdout
    assert "paused nightly" in cli.invoke(main, ["schedule", "pause", "nightly"]).stdout
    assert "nightly  0 2 * * *  paused  next -" in cli.invoke(main, ["schedule", "list"]).stdout
    assert "resumed nightly: next" in cli.invoke(main, ["schedule", "resume", "nightly"]).stdout
    ran = cli.invoke(main, ["run", str(path)])
    assert ran.exit_code == 2 and "promptlab schedule add" in ran.output
    assert "removed nightly" in cli.invoke(main, ["schedule", "remove", "nightly"]).stdout
    missing = cli.invoke(main, ["schedule", "pause", "nightly"])
    assert missing.exit_code != 0 and "no schedule named 'nightly'" in missing.output


def test_run_with_after_a_live_run_says_it_waits_and_exits_0(tmp_path: Path, db_path: Path) -> None:
    with Workbench.open(Settings.from_env()) as wb:
        prep = wb.runs.start(wb.runs.spec_from_data(spec_data(tmp_path, "prep")))
        wb.runs.cancel(prep)  # a cancelled run is waited for (resume continues it)
        wb.runs.wait(prep, timeout=30)
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(spec_data(tmp_path, "eval", after=["prep"])))
    ran = CliRunner().invoke(main, ["run", str(path)])
    assert ran.exit_code == 0, ran.output
    assert "waits for the runs it comes after" in ran.stdout
    status = CliRunner().invoke(main, ["status"])
    assert "waiting" in status.stdout
