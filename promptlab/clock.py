"""The engine's clock: one seam for elapsed time and wall-clock stamps.

Everything in the engine that measures a wait or stamps a record asks the Clock it was
given, so a test can run the engine against a clock it moves by hand.
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
