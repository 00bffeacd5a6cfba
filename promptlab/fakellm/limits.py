"""fakellm's rate limits: continuous token buckets, RPM and TPM checked together.

Each bucket holds `burst_s` seconds' worth of the per-minute limit; a request costs one
request and its estimated prompt tokens plus `max_tokens`, and a rejected request
costs nothing. A request larger than the bucket (but within the per-minute limit) is
admitted once the bucket is full, leaving it in debt, as the real APIs do.

Like the providers' buckets they start full, and the reset headers give the time until
a bucket is full again (not until the next request fits). `shared_load` stands for
another client on the same key (the providers count limits per organization): it takes
that share of every refill, so the caller gets less than the `limit` headers say.

The buckets read the clock they are given (promptlab/clock.py): a test holding a
`ManualClock` sees exactly the limits it set, however long the machine takes between
its requests.
"""

from __future__ import annotations

from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.fakellm import wire


class TokenBucket:
    """A continuous token bucket: `per_minute / 60` per second, holding `burst_s` worth."""

    def __init__(self, per_minute: int, burst_s: float, now: float, shared_load: float = 0.0):
        self.limit = per_minute
        #: What refills for this caller: the limit less what the other client takes.
        self.rate = per_minute / 60.0 * (1.0 - shared_load)
        self.capacity = max(1.0, per_minute / 60.0 * burst_s)
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_s(self, cost: float) -> float:
        """Seconds until `cost` can be taken (0 if now); costs above capacity need a full bucket."""
        need = min(cost, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.level) / self.rate)


class Limiter:
    """RPM and TPM buckets, checked together so a rejected request takes nothing."""

    def __init__(
        self,
        rpm: int | None,
        tpm: int | None,
        burst_s: float,
        shared_load: float = 0.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock
        now = clock.monotonic()
        self.requests = TokenBucket(rpm, burst_s, now, shared_load) if rpm else None
        self.tokens = TokenBucket(tpm, burst_s, now, shared_load) if tpm else None

    def try_acquire(self, cost: int) -> tuple[bool, float, str]:
        """(admitted, retry-after seconds, which limit) for one request costing `cost` tokens."""
        now = self.clock.monotonic()
        waits: list[tuple[float, str]] = []
        for bucket, amount, name in ((self.requests, 1, "requests"), (self.tokens, cost, "tokens")):
            if bucket is not None:
                bucket.refill(now)
                waits.append((bucket.wait_s(amount), name))
        wait, which = max(waits, default=(0.0, ""))
        if wait > 0:
            return False, wait, which
        if self.requests is not None:
            self.requests.level -= 1
        if self.tokens is not None:
            self.tokens.level -= cost
        return True, 0.0, ""

    def openai_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for bucket, name in ((self.requests, "requests"), (self.tokens, "tokens")):
            if bucket is not None:
                headers[f"x-ratelimit-limit-{name}"] = str(bucket.limit)
                headers[f"x-ratelimit-remaining-{name}"] = str(max(0, int(bucket.level)))
                headers[f"x-ratelimit-reset-{name}"] = wire.openai_duration(bucket.reset_s())
        return headers

    def anthropic_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        now = self.clock.now()
        for bucket, name in ((self.requests, "requests"), (self.tokens, "tokens")):
            if bucket is not None:
                prefix = f"anthropic-ratelimit-{name}"
                headers[f"{prefix}-limit"] = str(bucket.limit)
                headers[f"{prefix}-remaining"] = str(max(0, int(bucket.level)))
                headers[f"{prefix}-reset"] = wire.anthropic_reset(bucket.reset_s(), now)
        return headers
