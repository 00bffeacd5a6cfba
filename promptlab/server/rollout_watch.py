"""The owner's thread that checks guarded rollouts (`wb.rollouts.check_all`) every
PROMPTLAB_ROLLOUT_CHECK_S seconds (5 by default): each running rollout's guardrails
against the live calls since it started, and its decision acted on (next stage, kill,
hold, promote). Only the process that owns the database runs one, so a decision is
taken once; while none runs, a rollout stays where it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class RolloutWatch:
    """Calls `check_all()` on its own thread between `start()` and `stop()`."""

    def __init__(self, check_all: Callable[[], object], every_s: float) -> None:
        self._check_all = check_all
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Checks done so far (a test waits on it instead of sleeping).
        self.checks = 0

    def start(self) -> RolloutWatch:
        self._thread = threading.Thread(target=self._run, name="promptlab-rollouts", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._check_all()
            except Exception:  # noqa: BLE001 - logged; the next check tries again
                log.exception("checking rollouts failed")
            self.checks += 1
