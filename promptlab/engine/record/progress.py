"""Live progress of a run: counts, throughput, ETA and the limiters' state."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.engine.send.tokenbucket import LimiterState

#: Throughput is measured over this trailing window.
THROUGHPUT_WINDOW_S = 10.0
#: At most one sample per this many seconds is kept.
SAMPLE_EVERY_S = 0.5


@dataclass(frozen=True)
class RunProgress:
    """Everything a progress bar or the Runs page shows about one run."""

    run_id: str
    name: str
    status: str
    reason: str | None
    active: bool
    total: int
    pending: int
    in_flight: int
    succeeded: int
    failed: int
    cancelled: int
    throughput_per_s: float | None
    eta_s: float | None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    limiters: tuple[LimiterState, ...] = field(default_factory=tuple)

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    @property
    def can_cancel(self) -> bool:
        """Active runs stop dispatching; interrupted ones get their open items closed."""
        return self.active or self.status not in ("completed", "failed", "cancelled")

    @property
    def can_resume(self) -> bool:
        """Anything not running and not completed can be resumed."""
        return not self.active and self.status != "completed"


class Counters:
    """In-memory item counts of an active run, and a throughput estimate."""

    def __init__(self, counts: dict[str, int], total: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self.total = total
        self.pending = counts.get("pending", 0) + counts.get("in_flight", 0)
        self.in_flight = 0
        self.succeeded = counts.get("succeeded", 0)
        self.failed = counts.get("failed", 0)
        self.cancelled = counts.get("cancelled", 0)
        self._samples: deque[tuple[float, int]] = deque()

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    def dispatched(self) -> None:
        self.pending -= 1
        self.in_flight += 1

    def finished(self, status: str, was_in_flight: bool) -> None:
        if was_in_flight:
            self.in_flight -= 1
        else:
            self.pending -= 1
        setattr(self, status, getattr(self, status) + 1)
        self._sample()

    def _sample(self) -> None:
        now = self._clock.monotonic()
        if not self._samples or now - self._samples[-1][0] >= SAMPLE_EVERY_S:
            self._samples.append((now, self.done))
        while self._samples and now - self._samples[0][0] > THROUGHPUT_WINDOW_S:
            self._samples.popleft()

    def throughput(self) -> float | None:
        """Items finished per second over the trailing window."""
        if not self._samples:
            return None
        now = self._clock.monotonic()
        first_t, first_done = self._samples[0]
        elapsed = now - first_t
        if elapsed <= 0:
            return None
        return (self.done - first_done) / elapsed

    def eta_s(self) -> float | None:
        rate = self.throughput()
        remaining = self.pending + self.in_flight
        if remaining == 0:
            return 0.0
        return remaining / rate if rate else None
