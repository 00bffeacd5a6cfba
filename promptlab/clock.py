"""The one clock: a seam for elapsed time and wall-clock stamps.

The Store holds the clock it was opened with (`Store(path, clock=...)`,
`Workbench.open(settings, clock=...)`); the registry, the audit log, datasets, feedback,
experiments, the engine and its writer all ask that clock, so a test can run the whole
product against a clock it moves by hand (`promptlab.engine.testing.ManualClock`). The
scheduler fires by it, and fakellm's rate limits refill by the one it is served with
(`serve_in_thread(config, clock)`).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds for durations, aware UTC datetimes for stored timestamps."""

    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()
