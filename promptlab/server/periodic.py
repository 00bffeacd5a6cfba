"""The owner's periodic work, each on a thread of its own between `start()` and `stop()`:
guarded rollouts checked every PROMPTLAB_ROLLOUT_CHECK_S (`wb.rollouts.check_all`: each
running rollout's guardrails against the live calls since it started, its decision acted
on), and rotating backups every PROMPTLAB_BACKUP_EVERY (backup_watch.py). Only the
process that owns the database runs them, so a decision is taken once and a copy made
once; while none runs, a rollout stays where it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Calls `work()` every `every_s` on a thread named `name`; a failure is logged (what
    failed, and why) and the next call tries again."""

    def __init__(self, name: str, every_s: float, work: Callable[[], object], what: str) -> None:
        self._name = name
        self._every_s = every_s
        self._work = work
        self._what = what
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Calls made so far, failed or not (a test waits on it instead of sleeping).
        self.runs = 0

    def start(self) -> Periodic:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._work()
            except Exception:  # noqa: BLE001 - logged; the next call tries again
                log.exception("%s failed", self._what)
            self.runs += 1
