"""The garbage collector while runs are going: young collections far less often.

At the engine's ceiling Python's cyclic collector took 600 to 900 ms of the engine
thread's CPU in a 6,000-item run, 15 to 20% of it (bench/audit.py --gc): with the
default threshold a young collection came every 700 net container allocations, which
an engine with hundreds of requests in flight reaches every few milliseconds; each one
walked the in-flight items' objects, promoted them, and so brought middle and full
collections of the whole heap (some 150,000 objects that imports leave behind).

While at least one run of the process is going, the young threshold is RUN_YOUNG_THRESHOLD
(20,000), planning included: the same run then collects about once (bench/audit.py prints the
count), and short-lived cycles wait longer to be freed: at most 20,000 container
objects more, a few MB. Freezing the heap as well (`gc.freeze`) measured no faster on
top of this, so it is not done.

The threshold is process-wide, so runs hold it together (`CollectorHold`) across runs
and engines, and the last one to end puts back the thresholds the process had, unless
the host changed them meanwhile. A host whose young threshold is already higher, or
whose collector is off (`gc.disable()` or a threshold of 0), is left alone.
`Settings.tune_gc` (PROMPTLAB_TUNE_GC=0) turns this off.
"""

from __future__ import annotations

import gc
import os
import threading

#: The young generation's threshold while runs are going (Python's default is 700).
RUN_YOUNG_THRESHOLD = 20_000

# Reentrant: a collection inside the locked part may finalise a dropped run, whose hold
# is released on this same thread.
_lock = threading.RLock()
_holds = 0
#: (the thresholds the first hold found, the ones it set); None while nothing is set.
_tuned: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None
#: Bumped in a forked child: holds it inherited were counted by its parent, not by it.
_generation = 0


class CollectorHold:
    """One run's hold on the tuned threshold; `release` it when the run ends (twice is
    harmless, so an engine closed mid-run can release what its runs still hold)."""

    def __init__(self, enabled: bool = True) -> None:
        self._held = enabled
        self._generation = _generation
        if enabled:
            _acquire()

    def release(self) -> None:
        with _lock:  # the engine's loop and its closing thread may both release
            if self._held and self._generation == _generation:
                _release()
            self._held = False

    def __enter__(self) -> CollectorHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _acquire() -> None:
    global _holds, _tuned
    with _lock:
        _holds += 1
        if _holds > 1:
            return
        found = gc.get_threshold()
        young, middle, old = found
        if not gc.isenabled() or young == 0 or young >= RUN_YOUNG_THRESHOLD:
            _tuned = None
            return
        tuned = (RUN_YOUNG_THRESHOLD, middle, old)
        gc.set_threshold(*tuned)
        _tuned = (found, tuned)


def _release() -> None:
    global _holds
    with _lock:
        _holds -= 1
        if _holds == 0:
            _untune()


def _untune() -> None:
    global _tuned
    if _tuned is None:
        return
    found, tuned = _tuned
    _tuned = None
    if gc.get_threshold() == tuned:  # else the host set its own meanwhile: keep it
        gc.set_threshold(*found)


def _after_fork_in_child() -> None:
    # The runs (and the engine threads) did not come along: nothing holds the tuning,
    # and the holds the child inherited are not its own (see CollectorHold.release).
    global _holds, _lock, _generation
    _lock = threading.RLock()
    _holds = 0
    _generation += 1
    _untune()


def _before_fork() -> None:
    # Held across the fork (looked up now: a child has its own), so the child never
    # sees a hold half-counted.
    _lock.acquire()


def _after_fork_in_parent() -> None:
    _lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
