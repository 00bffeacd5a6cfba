"""`wb.schedules`: run specs submitted on a cron schedule (`schedule:` in the spec).

A long-lived owner (`promptlab serve`, or the app serving the API) runs the scheduler
thread (promptlab/schedules/scheduler.py), which calls `fire_due`; every change here
wakes it. Schedules are kept whether or not one runs: `list` shows when each is next due.
"""

from __future__ import annotations

import builtins  # `list` below names a method: annotations say builtins.list
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from promptlab.audit.actor import acting_as
from promptlab.engine import RunSpec
from promptlab.errors import PromptlabError, SpecError
from promptlab.facades.context import Context
from promptlab.facades.runs import Runs
from promptlab.records import ScheduleRecord
from promptlab.schedules.cron import next_time
from promptlab.store.schedules import ScheduleStore

__all__ = ["Fired", "MAX_SCHEDULES", "Schedules", "firing_order"]

log = logging.getLogger(__name__)

#: Most schedules one database keeps: each is checked at every firing, and more than
#: this is a loop gone wrong, not a team's nightly jobs.
MAX_SCHEDULES = 500


@dataclass(frozen=True)
class Fired:
    """One firing: the run it submitted, or why it could not."""

    name: str
    run_id: str | None
    error: str | None


class Schedules:
    """Add, list, pause, resume and remove schedules; submit the ones due."""

    def __init__(self, context: Context, runs: Runs) -> None:
        self._context = context
        self._runs = runs
        self._store = ScheduleStore(context.store)
        self._listeners: builtins.list[Callable[[], None]] = []
        self._firing = threading.Lock()

    def add(self, spec: RunSpec) -> ScheduleRecord:
        """Keep the spec under its name, submitted at each time its `schedule` matches
        (a schedule of that name is replaced). What it names is checked now, as for a
        run: a prompt label is resolved again at each firing."""
        if spec.schedule is None:
            raise SpecError(
                f'run spec {spec.name}: no schedule; add `schedule: "0 2 * * *"` (a cron '
                "expression, UTC) to submit it on one"
            )
        names = {s.name for s in self._store.all()}
        if spec.name not in names and len(names) >= MAX_SCHEDULES:
            raise SpecError(f"schedule: at most {MAX_SCHEDULES} schedules; remove one first")
        self._runs.estimate(spec)  # refused now, not at 2 a.m.: what the spec names exists
        now = self._context.store.clock.now()
        stored = {k: v for k, v in spec.raw.items() if k != "schedule"}
        author = self._context.author()
        created = self._store.put(
            spec.name, spec.schedule, stored, author, next_time(spec.schedule, now)
        )
        self._changed("schedule.added" if created else "schedule.replaced", spec.name, author)
        return self._store.get(spec.name)

    def list(self) -> builtins.list[ScheduleRecord]:
        return self._store.all()

    def get(self, name: str) -> ScheduleRecord:
        return self._store.get(name)

    def pause(self, name: str) -> ScheduleRecord:
        """Stop submitting it until `resume`."""
        self._store.set_paused(name, True, None)
        self._changed("schedule.paused", name, self._context.author())
        return self._store.get(name)

    def resume(self, name: str) -> ScheduleRecord:
        """Submit it again from its next time after now (times missed meanwhile are not)."""
        cron = self._store.get(name).cron
        self._store.set_paused(name, False, next_time(cron, self._context.store.clock.now()))
        self._changed("schedule.resumed", name, self._context.author())
        return self._store.get(name)

    def remove(self, name: str) -> None:
        self._store.remove(name)
        self._changed("schedule.removed", name, self._context.author())

    def next_due(self) -> datetime | None:
        return self._store.next_due()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every change (the scheduler wakes to look again)."""
        self._listeners.append(listener)

    def fire_due(self, now: datetime | None = None) -> builtins.list[Fired]:
        """Submit every schedule due by `now` once (an owner that was down catches up
        with one firing, not one per time missed), those a due one comes after first."""
        now = now or self._context.store.clock.now()
        fired = []
        with self._firing:  # one firing at a time, whoever calls
            for schedule in firing_order(self._store.due(now)):
                fired.append(self._fire(schedule, now))
        return fired

    def _fire(self, schedule: ScheduleRecord, now: datetime) -> Fired:
        run_id = error = None
        try:
            spec = self._runs.spec_from_data(schedule.spec, default_name=schedule.name)
            with acting_as(schedule.author):
                run_id = self._runs.start(spec)
        except PromptlabError as exc:
            error = str(exc)
            log.warning("schedule %s: no run submitted: %s", schedule.name, error)
        self._store.fired(schedule.name, now, run_id, error, next_time(schedule.cron, now))
        self._context.audit_change(
            "schedule.fired",
            schedule.author,
            {"schedule": schedule.name, "error": error},
            run_id=run_id,
        )
        return Fired(schedule.name, run_id, error)

    def _changed(self, kind: str, name: str, author: str) -> None:
        self._context.audit_change(kind, author, {"schedule": name})
        for listener in self._listeners:
            listener()


def firing_order(due: Sequence[ScheduleRecord]) -> builtins.list[ScheduleRecord]:
    """`due` with every schedule after those due with it that it comes after (`after:`),
    so that it waits for their new runs, not yesterday's; otherwise in the order given.
    A cycle is broken where it closes."""
    by_name = {s.name: s for s in due}
    ordered: builtins.list[ScheduleRecord] = []
    placed: set[str] = set()
    visiting: set[str] = set()

    def place(schedule: ScheduleRecord) -> None:
        if schedule.name in placed or schedule.name in visiting:
            return
        visiting.add(schedule.name)
        for name in schedule.after:
            if name in by_name and name != schedule.name:
                place(by_name[name])
        visiting.discard(schedule.name)
        placed.add(schedule.name)
        ordered.append(schedule)

    for schedule in due:
        place(schedule)
    return ordered
