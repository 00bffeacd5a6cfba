"""The endpoint limiter: buckets, FIFO admission, concurrency, gate, AIMD and headers."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest

from promptlab.engine.send.limiter import (
    CLEAN_WINDOW_S,
    DECREASE_FACTOR,
    EndpointLimiter,
    Limits,
    RunCappedLimiter,
    TokenBucket,
    _reset_seconds,
)


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_refills_at_its_rate_and_caps_at_capacity() -> None:
    bucket = TokenBucket(rate_per_s=10.0, capacity=5.0, now=0.0, level=0.0)
    assert bucket.time_until(3, now=0.0) == pytest.approx(0.3)
    assert bucket.time_until(3, now=0.3) == 0.0
    bucket.refill(100.0)
    assert bucket.level == 5.0


def test_a_request_larger_than_the_bucket_waits_for_a_full_bucket_then_goes_into_debt() -> None:
    bucket = TokenBucket(rate_per_s=10.0, capacity=5.0, now=0.0, level=5.0)
    assert bucket.time_until(50, now=0.0) == 0.0
    bucket.take(50)
    assert bucket.level == -45.0
    assert bucket.time_until(1, now=0.0) == pytest.approx(4.6)


def test_start_is_a_short_burst_not_a_minute() -> None:
    limiter = EndpointLimiter("e", Limits(rpm=6000, tpm=600_000), clock=FakeClock())
    state = limiter._rpm
    assert state.level <= 6000 / 60  # at most one second's worth, never 6000


def test_admission_is_first_come_first_served() -> None:
    # 1000 tokens/s, bucket of 0.1 s (100 tokens): the big request must not be overtaken.
    limiter = EndpointLimiter("e", Limits(tpm=60_000, burst_s=0.1))
    order: list[str] = []

    async def ask(name: str, tokens: int) -> None:
        permit = await limiter.acquire(tokens)
        order.append(name)
        limiter.release(permit, tokens)

    async def main() -> None:
        tasks = [asyncio.create_task(ask("small-1", 50))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(ask("big", 400)))
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(ask(f"small-{i}", 10)) for i in range(2, 6)]
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == ["small-1", "big", "small-2", "small-3", "small-4", "small-5"]


def test_concurrency_cap_holds_the_next_request_until_a_slot_frees() -> None:
    limiter = EndpointLimiter("e", Limits(concurrency=2))

    async def main() -> None:
        first = await limiter.acquire(1)
        await limiter.acquire(1)
        third = asyncio.create_task(limiter.acquire(1))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not third.done()
        assert limiter.state().waiting == 1
        limiter.release(first, 1)
        permit = await third
        assert permit.wait_reason == "concurrency"

    asyncio.run(main())


def test_throttle_closes_the_gate_and_waiters_say_why() -> None:
    limiter = EndpointLimiter("e", Limits(rpm=60_000, concurrency=10))

    async def main() -> None:
        limiter.on_throttle(0.05)
        assert limiter.state().gate_closed_until is not None
        permit = await limiter.acquire(1)
        assert permit.wait_reason == "gate"
        assert permit.waited_s > 0

    asyncio.run(main())


def test_aimd_decreases_once_per_burst_and_recovers_additively() -> None:
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(rpm=1200, concurrency=20), clock=clock)
    for _ in range(10):  # 429s of requests sent at the same rate count once
        limiter.on_throttle(0.0, epoch=0)
    state = limiter.state()
    assert state.rate_factor == pytest.approx(DECREASE_FACTOR)
    assert state.concurrency == int(20 * DECREASE_FACTOR)
    assert state.throttles == 10
    factors = []
    for _ in range(30):
        clock.now += CLEAN_WINDOW_S
        limiter._maybe_recover(clock.now)
        factors.append(limiter.state().rate_factor)
    assert factors == sorted(factors)  # only up
    assert factors[-1] == 1.0
    assert limiter.state().concurrency == 20


def test_failed_attempts_keep_their_reservation() -> None:
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(tpm=60_000), clock=clock)

    async def main() -> None:
        level = limiter._tpm.level
        permit = await limiter.acquire(300)
        limiter.release(permit, None)
        assert limiter._tpm.level == level - 300
        permit = await limiter.acquire(300)
        limiter.release(permit, 100)  # used 100 of 300: 200 come back
        assert limiter._tpm.level == level - 300 - 100

    asyncio.run(main())


def test_limits_are_learned_from_headers_when_none_are_configured() -> None:
    limiter = EndpointLimiter("e", Limits(), clock=FakeClock())
    assert limiter.state().rpm is None
    limiter.observe_headers(
        {"x-ratelimit-limit-requests": "3000", "x-ratelimit-limit-tokens": "9000"}
    )
    state = limiter.state()
    assert state.learned_rpm is not None and 2900 <= state.learned_rpm <= 3000
    assert state.rpm is not None and state.tpm is not None


def test_a_server_limit_below_the_configured_one_wins() -> None:
    limiter = EndpointLimiter("e", Limits(rpm=3600), clock=FakeClock())
    limiter.observe_headers({"anthropic-ratelimit-requests-limit": "3000"})
    rpm = limiter.state().rpm
    assert rpm is not None and rpm <= 3000


def _admitted_after(limiter: EndpointLimiter, clock: FakeClock, tokens: int = 1) -> float:
    """Seconds until the next request of `tokens` is admitted: what `acquire` waits for
    (the gate, then both buckets), read at the fake clock's now."""
    now = clock()
    return max(
        limiter._gate_until - now,
        limiter._rpm.time_until(1, now),
        limiter._tpm.time_until(tokens, now),
        0.0,
    )


def test_an_empty_server_bucket_paces_one_refill_interval_not_the_full_reset() -> None:
    # 600 rpm is one request every 100 ms; the reset (10 s) is the time to a *full* bucket.
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(rpm=600), clock=clock)
    limiter.observe_headers(
        {
            "x-ratelimit-limit-requests": "600",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "10s",
        }
    )
    waited = _admitted_after(limiter, clock)
    assert 0.05 <= waited <= 0.2
    assert limiter.state().gate_closed_until is None


def test_an_empty_token_bucket_waits_for_the_request_s_tokens_only() -> None:
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(tpm=60_000), clock=clock)  # 1000 tokens/s
    reset = (datetime.now(UTC) + timedelta(seconds=30)).isoformat()
    limiter.observe_headers(
        {"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": reset}
    )
    assert 0.4 <= _admitted_after(limiter, clock, tokens=500) <= 0.6


def test_a_429_with_an_exact_retry_after_is_not_held_to_the_full_reset() -> None:
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(rpm=3000), clock=clock)  # one per 20 ms
    limiter.observe_headers(
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "9.8s"}
    )
    limiter.on_throttle(0.012)
    assert _admitted_after(limiter, clock) < 0.1


def test_an_empty_bucket_of_unknown_rate_waits_the_reset_shared_by_what_it_held() -> None:
    # No configured or learned limit: the server once reported 100 remaining and now 0
    # with 10 s to full, so one request refills about every 100 ms.
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(), clock=clock)
    limiter.observe_headers({"x-ratelimit-remaining-requests": "100"})
    limiter.observe_headers(
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "10s"}
    )
    assert limiter._gate_until == pytest.approx(clock.now + 0.1)
    # Never seen more than empty: the reset is all there is to go by.
    fresh = EndpointLimiter("f", Limits(), clock=clock)
    fresh.observe_headers(
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"}
    )
    assert fresh._gate_until == pytest.approx(clock.now + 2.0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("1.5", 1.5), ("", None)],
)
def test_reset_durations(text: str, seconds: float | None) -> None:
    assert _reset_seconds(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_a_full_server_bucket_is_spent_at_once_then_the_rate_paces() -> None:
    """Cold start: 1 s of burst; once the server says it holds 500, 500 may go now."""
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(rpm=3000), clock=clock)  # 50 a second
    assert limiter._rpm.level == pytest.approx(50)  # before any header: one second's worth
    limiter.observe_headers({"x-ratelimit-remaining-requests": "500"})
    assert limiter._rpm.capacity == 500 and limiter._rpm.level == pytest.approx(500)

    async def admit(count: int) -> int:
        admitted = 0
        for _ in range(count):
            permit = await asyncio.wait_for(limiter.acquire(1), 0.01)
            limiter.release(permit, 1)
            admitted += 1
        return admitted

    assert asyncio.run(admit(500)) == 500  # the burst, with no clock time passing
    assert limiter._rpm.time_until(1, clock.now) == pytest.approx(1 / 50)  # then the rate


def test_requests_in_flight_are_taken_off_what_the_server_reports() -> None:
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(rpm=6000, tpm=1_000_000), clock=clock)

    async def hold(count: int, tokens: int) -> None:
        for _ in range(count):
            await limiter.acquire(tokens)

    asyncio.run(hold(10, 100))
    limiter.observe_headers(
        {"x-ratelimit-remaining-requests": "40", "x-ratelimit-remaining-tokens": "5000"}
    )
    assert limiter._rpm.level == pytest.approx(30)
    assert limiter._tpm.level == pytest.approx(4000)


def test_a_server_with_less_room_than_we_thought_holds_us_back() -> None:
    clock = FakeClock()
    limiter = EndpointLimiter("e", Limits(rpm=6000), clock=clock)
    limiter.observe_headers({"x-ratelimit-remaining-requests": "400"})  # another client drew
    limiter.observe_headers({"x-ratelimit-remaining-requests": "3"})
    assert limiter._rpm.level == pytest.approx(3)
    assert limiter._rpm.capacity == 400  # the burst it can hold is still known


def test_a_capped_run_shows_the_tighter_of_its_cap_and_the_shared_budget() -> None:
    shared = EndpointLimiter("sim", Limits(rpm=6000, concurrency=64), clock=FakeClock())
    capped = RunCappedLimiter(shared, Limits(rpm=600, concurrency=8))
    state = capped.state()
    assert (state.name, state.rpm, state.concurrency) == ("sim (run cap)", 600, 8)
    assert shared.state().rpm == 6000  # the shared budget itself is untouched


def test_server_headroom_never_lifts_a_runs_own_cap() -> None:
    clock = FakeClock()
    shared = EndpointLimiter("e", Limits(rpm=60_000), clock=clock)
    capped = RunCappedLimiter(shared, Limits(rpm=60))  # one a second for this run
    capped.observe_headers({"x-ratelimit-remaining-requests": "9999"})

    async def admitted_without_waiting() -> int:
        count = 0
        with contextlib.suppress(TimeoutError):
            for _ in range(100):
                permit = await asyncio.wait_for(capped.acquire(1), 0.01)
                capped.release(permit, 1)
                count += 1
        return count

    assert asyncio.run(admitted_without_waiting()) == 1  # the cap's one-second burst
    assert shared._rpm.level > 9000  # the shared budget did take the headroom
