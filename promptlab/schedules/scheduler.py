"""The scheduler: a thread of the long-lived owner that submits schedules when they fall due.

It sleeps until the next schedule's time (or until a schedule changes: `wb.schedules`
wakes it), fires what is due, and sleeps again: no polling. Only the process that owns
the database runs one (`promptlab serve`, or the app serving the API), so each firing
is submitted once; while none runs, schedules keep their times and the next owner to
start catches up with one firing each.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from promptlab.clock import Clock

log = logging.getLogger(__name__)

#: Longest sleep: a wall clock moved by hand (or a suspended laptop) is noticed within it.
MAX_SLEEP_S = 600.0


class Firing(Protocol):
    """What the scheduler drives (`wb.schedules`)."""

    def fire_due(self, now: datetime | None = None) -> object: ...

    def next_due(self) -> datetime | None: ...

    def on_change(self, listener: Callable[[], None]) -> None: ...


class Scheduler:
    """Fires `schedules` on its own thread between `start()` and `stop()`."""

    def __init__(self, schedules: Firing, clock: Clock) -> None:
        self._schedules = schedules
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: The clock's time the scheduler sleeps until (None before its first look, or
        #: when nothing is due): what it decided, for a test or a status line to read.
        self.sleeping_until: datetime | None = None

    def start(self) -> Scheduler:
        self._schedules.on_change(self.wake)
        self._thread = threading.Thread(target=self._run, name="promptlab-scheduler", daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        """Look again now (a schedule was added, paused or resumed)."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            # Cleared before looking: a change from now on wakes the next sleep. Checked
            # after clearing: a stop() whose wake-up was just cleared is seen here, not
            # after one more firing and a sleep of up to MAX_SLEEP_S.
            self._wake.clear()
            if self._stopping:
                return
            try:
                self._schedules.fire_due(self._clock.now())
                next_at = self._schedules.next_due()
            except Exception:  # noqa: BLE001 - the scheduler outlives one bad firing
                log.exception("scheduler: firing failed; trying again in %s s", MAX_SLEEP_S)
                next_at = None
            sleep = MAX_SLEEP_S
            if next_at is not None:
                sleep = min(MAX_SLEEP_S, max(0.0, (next_at - self._clock.now()).total_seconds()))
            self.sleeping_until = next_at
            # A wait on the real clock, then a fresh look at the injected one: a slow
            # machine fires late, never early, and a clock moved meanwhile is read again.
            self._wake.wait(sleep)
