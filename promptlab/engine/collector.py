"""The garbage collector while runs are going: fewer, cheaper collections.

At the engine's ceiling Python's cyclic collector cost 15 to 20% of the engine
thread's time (600 to 900 ms of CPU in a 6,000-item run, bench/audit.py): a young
collection came every 700 container allocations, each one walked every in-flight
item's objects again, and every few seconds a full collection walked the whole heap,
some 150,000 objects that imports made and that never die.

While at least one run of the process is going, `tuned_collector`:

- freezes the objects that existed when the first run started (`gc.freeze`: the
  collector skips them; they are unfrozen when the last run ends, so garbage among
  them is still collected then), and
- raises the young generation's threshold to RUN_THRESHOLDS, so short-lived cycles
  are collected in bigger, rarer passes (a few MB more at most).

Both are process-wide, so they are counted across runs and engines; the thresholds
the process had are put back when the last run ends. A process that froze objects
itself, or disabled the collector, is left alone. `Settings.tune_gc`
(PROMPTLAB_TUNE_GC=0) turns this off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: (young, middle, old) thresholds while runs are going; Python's default is (700, 10, 10).
RUN_THRESHOLDS = (20_000, 10, 10)

_lock = threading.Lock()
_runs = 0
#: What the first run found: the thresholds to put back, and whether it froze the heap.
_saved: tuple[tuple[int, int, int], bool] | None = None


@contextmanager
def tuned_collector(enabled: bool = True) -> Iterator[None]:
    """Collect less often while the body (a run) is going; see the module's docstring."""
    if not enabled:
        yield
        return
    _enter()
    try:
        yield
    finally:
        _exit()


def _enter() -> None:
    global _runs, _saved
    with _lock:
        _runs += 1
        if _runs > 1:
            return
        if not gc.isenabled():
            _saved = None
            return
        # Another freeze is the host's own (a server about to fork, say): keep out of it.
        freeze = gc.get_freeze_count() == 0
        _saved = (gc.get_threshold(), freeze)
        if freeze:
            gc.freeze()
        gc.set_threshold(*RUN_THRESHOLDS)


def _exit() -> None:
    global _runs, _saved
    with _lock:
        _runs -= 1
        if _runs > 0 or _saved is None:
            return
        thresholds, froze = _saved
        _saved = None
        gc.set_threshold(*thresholds)
        if froze:
            gc.unfreeze()
