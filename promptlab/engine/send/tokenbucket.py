"""The token bucket the endpoint limiter keeps its rates in, and the plain data it works
with: an endpoint's configured Limits, the Permit a request is admitted with, a
LimiterState snapshot for progress displays."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

#: Seconds of traffic a bucket may hold: a short burst, never a full minute at start.
DEFAULT_BURST_S = 1.0


@dataclass(frozen=True)
class Limits:
    """Configured limits of one endpoint; None means not configured (learn or unlimited)."""

    rpm: int | None = None
    tpm: int | None = None
    concurrency: int | None = None
    burst_s: float = DEFAULT_BURST_S


@dataclass(frozen=True)
class Permit:
    """One admitted request: what it reserved and how long it waited, and why."""

    tokens: int
    waited_s: float
    wait_reason: str | None
    #: The rate epoch it was admitted in: a 429 on it only lowers the rate it was sent at.
    epoch: int = 0


@dataclass(frozen=True)
class LimiterState:
    """A snapshot for progress displays."""

    name: str
    rpm: float | None
    tpm: float | None
    rate_factor: float
    concurrency: int
    in_flight: int
    waiting: int
    gate_closed_until: datetime | None
    throttles: int
    learned_rpm: int | None
    learned_tpm: int | None


class TokenBucket:
    """A leaky-free token bucket with an explicit clock; levels may go negative (debt)."""

    def __init__(self, rate_per_s: float, capacity: float, now: float, level: float = 0.0):
        self.rate_per_s = rate_per_s
        self.capacity = capacity
        self.level = min(level, capacity)
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate_per_s)
            self.stamp = now

    def time_until(self, amount: float, now: float) -> float:
        """Seconds until `amount` (at most a full bucket) can be taken."""
        self.refill(now)
        need = min(amount, self.capacity) - self.level
        if need <= 0:
            return 0.0
        return need / self.rate_per_s if self.rate_per_s > 0 else math.inf

    def take(self, amount: float) -> None:
        self.level -= amount

    def give(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)

    def set_rate(self, rate_per_s: float, burst_s: float, now: float, floor: float = 1.0) -> None:
        self.refill(now)
        self.rate_per_s = rate_per_s
        self.capacity = max(floor, rate_per_s * burst_s)
        self.level = min(self.level, self.capacity)
