"""Per-endpoint rate limiting: RPM and TPM buckets, a concurrency cap, a gate, and AIMD.

One `EndpointLimiter` exists per provider endpoint and key, shared by every run in the
engine, so concurrent runs draw on one budget. Requests are admitted first come first
served: the head of the queue waits until *its* cost fits, so a large request is never
starved by a stream of small ones. The buckets and the plain data the limiter works
with (Limits, Permit, LimiterState) are in engine/send/tokenbucket.py.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

# Re-exported: engine/spec/endpoints.py reads the default burst from here.
from promptlab.engine.send.tokenbucket import DEFAULT_BURST_S as DEFAULT_BURST_S
from promptlab.engine.send.tokenbucket import LimiterState, Limits, Permit, TokenBucket

#: Concurrency when neither the endpoint nor the run names one.
DEFAULT_CONCURRENCY = 64
#: Multiplicative decrease of rate and concurrency on a 429/529.
DECREASE_FACTOR = 0.85
#: Additive increase per clean window, fast far below the last throttled rate, slow near it.
FAST_STEP = 0.04
SLOW_STEP = 0.01
#: Below this share of the last throttled rate, recover with FAST_STEP.
NEAR_THROTTLE_SHARE = 0.9
#: Seconds without a throttle that count as one clean window.
CLEAN_WINDOW_S = 5.0
#: The rate never drops below this share of the configured limit.
MIN_RATE_FACTOR = 0.1
#: Gate length when a 429/529 gives no retry-after: full jitter up to this.
DEFAULT_GATE_S = 1.0
#: Share of a limit learned from headers that we aim for, leaving room for clock skew.
LEARNED_HEADROOM = 0.98

WAIT_GATE = "gate"
WAIT_RATE = "rate_limit"
WAIT_CONCURRENCY = "concurrency"

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


class EndpointLimiter:
    """RPM + TPM buckets, an adaptive concurrency cap and a shared gate for one endpoint."""

    def __init__(
        self,
        name: str,
        limits: Limits,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        spend_headroom: bool = True,
    ) -> None:
        self.name = name
        #: False for a run's own cap: the server's headroom may hold it back, never
        #: let it burst past what its spec asked for.
        self._spend_headroom = spend_headroom
        self._clock = clock
        self._rng = rng or random.Random()
        self._limits = limits
        self._learned_rpm: int | None = None
        self._learned_tpm: int | None = None
        self._factor = 1.0
        self._throttled_factor = 1.0
        self._epoch = 0
        self._last_throttle = clock()
        self._last_increase = clock()
        self._gate_until = 0.0
        self._throttles = 0
        self._in_flight = 0
        self._in_flight_tokens = 0
        #: The largest `remaining` the server reported per bucket: the burst it holds.
        #: Our buckets may hold that much, so headroom the server grants gets spent.
        self._server_burst = {"requests": 0.0, "tokens": 0.0}
        #: The largest `remaining` seen at all, to pace an empty bucket of unknown rate.
        self._most_remaining = {"requests": 0, "tokens": 0}
        self._waiting = 0
        self._fifo = asyncio.Lock()
        self._slot_freed = asyncio.Event()
        self._head_reason: str | None = None
        now = clock()
        self._rpm = TokenBucket(0.0, 1.0, now, level=1.0)
        self._tpm = TokenBucket(0.0, 1.0, now, level=0.0)
        self._concurrency = self._base_concurrency()
        self._apply_rates(now, start=True)

    # ---- configuration -------------------------------------------------------------

    def _base_concurrency(self) -> int:
        return self._limits.concurrency or DEFAULT_CONCURRENCY

    def _base_rpm(self) -> float | None:
        return _min_known(self._limits.rpm, self._learned_rpm)

    def _base_tpm(self) -> float | None:
        return _min_known(self._limits.tpm, self._learned_tpm)

    def _apply_rates(self, now: float, start: bool = False) -> None:
        burst = self._limits.burst_s
        for unit, bucket, base in (
            ("requests", self._rpm, self._base_rpm()),
            ("tokens", self._tpm, self._base_tpm()),
        ):
            if base is None:
                bucket.set_rate(math.inf, burst, now)
                bucket.level = math.inf
                bucket.capacity = math.inf
                continue
            was_unlimited = math.isinf(bucket.capacity)
            bucket.set_rate(
                base * self._factor / 60.0, burst, now, floor=max(1.0, self._server_burst[unit])
            )
            if start or was_unlimited:
                # Start with one second's worth at most: a smooth start, not a minute's burst.
                bucket.level = min(bucket.capacity, max(1.0, base / 60.0))

    # ---- admission -----------------------------------------------------------------

    async def acquire(self, tokens: int) -> Permit:
        """Wait for the gate, a concurrency slot and rate budget for `tokens`; FIFO."""
        started = self._clock()
        self._waiting += 1
        reason: str | None = None
        try:
            async with self._fifo:
                while True:
                    now = self._clock()
                    self._maybe_recover(now)
                    if self._gate_until > now:
                        reason = self._head_reason = WAIT_GATE
                        await asyncio.sleep(self._gate_until - now)
                        continue
                    if self._in_flight >= self._concurrency:
                        reason = reason or WAIT_CONCURRENCY
                        self._head_reason = WAIT_CONCURRENCY
                        self._slot_freed.clear()
                        await self._slot_freed.wait()
                        continue
                    wait = max(self._rpm.time_until(1, now), self._tpm.time_until(tokens, now))
                    if wait > 0:
                        reason = self._head_reason = WAIT_RATE
                        await asyncio.sleep(wait)
                        continue
                    self._rpm.take(1)
                    self._tpm.take(tokens)
                    self._in_flight += 1
                    self._in_flight_tokens += tokens
                    break
        finally:
            self._waiting -= 1
        waited = self._clock() - started
        if reason is None and waited > 0:
            # Queued behind the head: it waited for the same reason.
            reason = self._head_reason
        return Permit(
            tokens=tokens,
            waited_s=waited,
            wait_reason=reason if waited > 0 else None,
            epoch=self._epoch,
        )

    def release(self, permit: Permit, used_tokens: int | None) -> None:
        """Give back the slot and, when usage is known, the unused part of the reservation.

        Failed attempts pass None: they keep their reservation, as they count at the
        providers too.
        """
        self._in_flight -= 1
        self._in_flight_tokens -= permit.tokens
        if used_tokens is not None:
            difference = permit.tokens - used_tokens
            if difference > 0:
                self._tpm.give(difference)
            else:
                self._tpm.take(-difference)
        self._slot_freed.set()

    # ---- feedback ------------------------------------------------------------------

    def on_throttle(self, retry_after_s: float | None, epoch: int | None = None) -> float:
        """A 429/529: close the gate and back off rate and concurrency; return the gate wait.

        Rate and concurrency drop once per epoch: 429s of requests sent before the last
        decrease say nothing about the new rate (as TCP halves once per window).
        """
        now = self._clock()
        self._throttles += 1
        self._last_throttle = now
        wait = (
            retry_after_s
            if retry_after_s is not None
            else self._rng.uniform(DEFAULT_GATE_S / 2, DEFAULT_GATE_S)
        )
        self._gate_until = max(self._gate_until, now + wait)
        if epoch is None or epoch == self._epoch:
            self._epoch += 1
            self._throttled_factor = self._factor
            self._factor = max(MIN_RATE_FACTOR, self._factor * DECREASE_FACTOR)
            self._concurrency = max(1, math.floor(self._concurrency * DECREASE_FACTOR))
            self._apply_rates(now)
        self._last_increase = now
        return wait

    def _maybe_recover(self, now: float) -> None:
        """Additive increase, one step per clean window since the last throttle."""
        if now - self._last_increase < CLEAN_WINDOW_S or now - self._last_throttle < CLEAN_WINDOW_S:
            return
        self._last_increase = now
        base = self._base_concurrency()
        if self._factor < 1.0:
            near = self._factor >= self._throttled_factor * NEAR_THROTTLE_SHARE
            self._factor = min(1.0, self._factor + (SLOW_STEP if near else FAST_STEP))
            self._apply_rates(now)
        if self._concurrency < base:
            self._concurrency = min(base, self._concurrency + max(1, base // 20))
            self._slot_freed.set()

    def observe_headers(self, headers: Mapping[str, str]) -> None:
        """Follow the server's rate-limit headers: learn limits, spend the headroom it
        reports (or hold back when it has less than we thought), pace empty buckets."""
        if not headers:
            return
        lower = {k.lower(): v for k, v in headers.items()}
        now = self._clock()
        changed = False
        reported: list[tuple[str, TokenBucket, int]] = []
        for unit, bucket in (("requests", self._rpm), ("tokens", self._tpm)):
            limit = _first_int(
                lower, f"x-ratelimit-limit-{unit}", f"anthropic-ratelimit-{unit}-limit"
            )
            if limit is not None and limit > 0:
                learned = int(limit * LEARNED_HEADROOM)
                attr = "_learned_rpm" if unit == "requests" else "_learned_tpm"
                if getattr(self, attr) != learned:
                    setattr(self, attr, learned)
                    changed = True
            remaining = _first_int(
                lower, f"x-ratelimit-remaining-{unit}", f"anthropic-ratelimit-{unit}-remaining"
            )
            if remaining is not None:
                reported.append((unit, bucket, remaining))
        if changed:
            self._apply_rates(now)
        for unit, bucket, remaining in reported:
            self._most_remaining[unit] = max(self._most_remaining[unit], remaining)
            if remaining <= 0 and math.isinf(bucket.capacity):
                reset = _reset_seconds(
                    lower.get(f"x-ratelimit-reset-{unit}")
                    or lower.get(f"anthropic-ratelimit-{unit}-reset")
                )
                self._pace_unknown_rate(unit, reset, now)
            self._follow_remaining(unit, bucket, remaining, now)

    def _pace_unknown_rate(self, unit: str, reset_s: float | None, now: float) -> None:
        """An empty server bucket whose rate we do not know: wait one refill interval.

        Both OpenAI and Anthropic define the reset as the time until the bucket is *full*
        again, so it bounds the wait; it is not the wait. A bucket that held B at most
        refills one unit every reset / B seconds. (With a known rate the bucket itself
        paces: `_follow_remaining` leaves it empty or in debt, one interval per unit.)
        """
        if reset_s is None or reset_s <= 0:
            return
        interval = reset_s / max(1, self._most_remaining[unit])
        self._gate_until = max(self._gate_until, now + interval)

    def _follow_remaining(self, unit: str, bucket: TokenBucket, remaining: int, now: float) -> None:
        """Take the server's `remaining` as the truth about what may be sent now.

        Our own requests still in flight may not be counted there yet, so they are
        taken off (a conservative reading). A server with more room than our bucket
        holds (it was idle, its bucket is full) gets its burst now, and the steady
        rate after that is still the configured or learned one.
        """
        if math.isinf(bucket.capacity):
            return
        bucket.refill(now)
        in_flight = self._in_flight if unit == "requests" else self._in_flight_tokens
        truth = float(remaining - in_flight)
        if not self._spend_headroom:
            bucket.level = min(bucket.level, truth)
            return
        if remaining > self._server_burst[unit]:
            self._server_burst[unit] = float(remaining)
            bucket.capacity = max(bucket.capacity, float(remaining))
        bucket.level = min(bucket.capacity, truth)

    # ---- display -------------------------------------------------------------------

    def state(self) -> LimiterState:
        now = self._clock()
        rpm = self._base_rpm()
        tpm = self._base_tpm()
        gate = None
        if self._gate_until > now:
            gate = datetime.now().astimezone() + timedelta(seconds=self._gate_until - now)
        return LimiterState(
            name=self.name,
            rpm=rpm * self._factor if rpm is not None else None,
            tpm=tpm * self._factor if tpm is not None else None,
            rate_factor=self._factor,
            concurrency=self._concurrency,
            in_flight=self._in_flight,
            waiting=self._waiting,
            gate_closed_until=gate,
            throttles=self._throttles,
            learned_rpm=self._learned_rpm,
            learned_tpm=self._learned_tpm,
        )


#: Concurrency of a run's own cap when its spec names none: the shared limiter decides.
UNCAPPED_CONCURRENCY = 1_000_000


class RunCappedLimiter:
    """A run's own limits (its spec's `limits:`) inside an endpoint's shared budget.

    A request takes a slot and budget from the run's cap first, then from the shared
    limiter, so the spec can only slow its own run down: other runs and later runs on
    the same endpoint and key see the shared budget as configured. Throttle feedback
    goes to the shared limiter alone (it describes the server's budget); headers to both.
    """

    def __init__(self, shared: EndpointLimiter, cap: Limits) -> None:
        self.shared = shared
        self.name = shared.name
        self.cap = EndpointLimiter(
            f"{shared.name} (this run)",
            Limits(
                rpm=cap.rpm,
                tpm=cap.tpm,
                concurrency=cap.concurrency or UNCAPPED_CONCURRENCY,
                burst_s=cap.burst_s,
            ),
            clock=shared._clock,
            spend_headroom=False,
        )

    async def acquire(self, tokens: int) -> Permit:
        own = await self.cap.acquire(tokens)
        try:
            shared = await self.shared.acquire(tokens)
        except BaseException:
            self.cap.release(own, 0)
            raise
        waited = own.waited_s + shared.waited_s
        reason = own.wait_reason if own.waited_s >= shared.waited_s else shared.wait_reason
        return Permit(tokens, waited, reason if waited > 0 else None, shared.epoch)

    def release(self, permit: Permit, used_tokens: int | None) -> None:
        self.shared.release(permit, used_tokens)
        self.cap.release(permit, used_tokens)

    def on_throttle(self, retry_after_s: float | None, epoch: int | None = None) -> float:
        return self.shared.on_throttle(retry_after_s, epoch)

    def observe_headers(self, headers: Mapping[str, str]) -> None:
        # The cap follows them too, but only to hold back: a server with less room than
        # the cap thinks slows this run; more room never lifts the spec's own limits.
        self.shared.observe_headers(headers)
        self.cap.observe_headers(headers)

    def state(self) -> LimiterState:
        """The endpoint as this run sees it: the tighter of its cap and the shared budget."""
        shared, cap = self.shared.state(), self.cap.state()
        return replace(
            shared,
            name=f"{shared.name} (run cap)",
            rpm=_min_known(shared.rpm, cap.rpm),
            tpm=_min_known(shared.tpm, cap.tpm),
            concurrency=min(shared.concurrency, cap.concurrency),
            in_flight=cap.in_flight,
            waiting=cap.waiting + shared.waiting,
        )


#: What a lane admits its requests through: the shared limiter, or a run's cap inside it.
Limiter = EndpointLimiter | RunCappedLimiter


def _min_known(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return float(min(known)) if known else None


def _first_int(headers: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = headers.get(name)
        if value is None:
            continue
        try:
            return int(float(value))
        except ValueError:
            continue
    return None


def _reset_seconds(value: str | None) -> float | None:
    """Seconds until a reset: OpenAI durations ('6m0s', '20ms', '1.5') or RFC 3339 times."""
    if not value:
        return None
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if parts and "".join(n + u for n, u in parts) == text:
        scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
        return sum(float(n) * scale[u] for n, u in parts)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (moment - datetime.now(moment.tzinfo)).total_seconds()
