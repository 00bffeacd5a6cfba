"""Anomaly detectors on synthetic streams: each fires on its pattern, none on steady noise."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from promptlab.checks.anomalies import (
    EMPTY_STREAK,
    AlertKind,
    Observation,
    RunDetector,
    detect,
)

FIELDS = frozenset({"category", "summary"})


def steady(seq: int, rng: random.Random, variant: str = "a") -> Observation:
    """5% timeouts, 5% invalid outputs, lengths 80-120 chars, fields filled: normal noise."""
    draw = rng.random()
    if draw < 0.05:
        return Observation(seq, variant, "failed", error_kind="timeout")
    check = "invalid" if draw < 0.10 else "valid"
    return Observation(seq, variant, "succeeded", None, check, FIELDS, rng.randint(80, 120))


def stream(n: int, odd: Callable[[int, random.Random], Observation | None]) -> list[Observation]:
    rng = random.Random(7)
    return [odd(i, rng) or steady(i, rng) for i in range(n)]


def kinds(observations: list[Observation]) -> list[str]:
    return [a.kind for a in detect("run_x", observations, {"a": FIELDS})]


def test_steady_noise_raises_nothing() -> None:
    assert kinds(stream(5_000, lambda i, r: None)) == []


def test_a_burst_of_failures_raises_one_failure_rate_alert() -> None:
    def burst(i: int, rng: random.Random) -> Observation | None:
        return Observation(i, "a", "failed", error_kind="server_error") if 400 <= i < 440 else None

    alerts = list(detect("run_x", stream(1_000, burst)))
    found = [a for a in alerts if a.kind == AlertKind.FAILURE_RATE]
    assert len(found) == 1  # one episode, one alert
    alert = found[0]
    assert 350 <= alert.first_seq <= 420 and 400 <= alert.last_seq < 440
    assert alert.message.startswith("a: ") and "did not complete" in alert.message
    # The same burst is one kind of error: a surge too.
    surge = [a for a in alerts if a.kind == AlertKind.ERROR_SURGE]
    assert len(surge) == 1 and "server_error" in surge[0].message


def test_a_surge_of_one_error_kind_among_steady_failures() -> None:
    # Failures stay ~40%, but from 600 on they are all rate_limit instead of a mix.
    def mix(i: int, rng: random.Random) -> Observation | None:
        if rng.random() < 0.3:
            kind = "rate_limit" if i >= 600 else rng.choice(["timeout", "server_error", "x", "y"])
            return Observation(i, "a", "failed", error_kind=kind)
        return Observation(i, "a", "succeeded", None, "valid", FIELDS, 100)

    alerts = list(detect("run_x", stream(1_000, mix)))
    assert [a.kind for a in alerts] == [AlertKind.ERROR_SURGE]
    assert "rate_limit" in alerts[0].message and alerts[0].last_seq >= 600


def test_a_field_empty_in_a_row_raises_once() -> None:
    def empty(i: int, rng: random.Random) -> Observation | None:
        if 300 <= i < 400:
            return Observation(i, "a", "succeeded", None, "valid", frozenset({"category"}), 100)
        return None

    alerts = [a for a in detect("run_x", stream(600, empty)) if a.kind == AlertKind.EMPTY_FIELD]
    assert len(alerts) == 1
    assert "'summary'" in alerts[0].message and alerts[0].first_seq >= 300
    assert alerts[0].last_seq - alerts[0].first_seq >= EMPTY_STREAK - 1


def test_a_schema_field_never_filled_is_watched_from_the_start() -> None:
    never = [
        Observation(i, "a", "succeeded", None, "valid", frozenset({"category"}), 100)
        for i in range(EMPTY_STREAK)
    ]
    assert kinds(never) == [AlertKind.EMPTY_FIELD]
    assert list(detect("run_x", never)) == []  # without the schema, nothing to expect


def test_output_length_collapse() -> None:
    def short(i: int, rng: random.Random) -> Observation | None:
        if i >= 500:
            return Observation(i, "a", "succeeded", None, "valid", FIELDS, rng.randint(10, 25))
        return None

    alerts = list(detect("run_x", stream(700, short), {"a": FIELDS}))
    assert [a.kind for a in alerts] == [AlertKind.LENGTH_COLLAPSE]
    assert "chars against" in alerts[0].message and 500 <= alerts[0].last_seq < 560


def test_variants_are_watched_apart() -> None:
    # Variant b fails all along (its own baseline); a is steady: neither alerts on rate.
    rng = random.Random(3)
    observations = []
    for i in range(2_000):
        if i % 2:
            observations.append(Observation(i, "b", "failed", error_kind="timeout"))
        else:
            observations.append(steady(i, rng))
    alerts = list(detect("run_x", observations))
    assert [a.kind for a in alerts if a.variant == "a"] == []
    assert {a.kind for a in alerts if a.variant == "b"} <= {AlertKind.ERROR_SURGE}


def test_per_item_cost_is_small_and_flat() -> None:
    # Not a timing assertion: the cost of the first and the last 20k items must be alike
    # (O(1) per item), within a wide factor. The cost is this thread's CPU time, not the
    # wall clock's: on a loaded machine the time the scheduler gives other processes
    # between the two measures is no cost of the detector.
    detector = RunDetector("run_x", {"a": FIELDS})
    observations = stream(100_000, lambda i, r: None)

    def cost(chunk: list[Observation]) -> float:
        t0 = time.thread_time()
        for obs in chunk:
            detector.observe(obs)
        return time.thread_time() - t0

    first = cost(observations[:20_000])
    cost(observations[20_000:80_000])
    last = cost(observations[80_000:])
    assert last < 3 * first + 0.05


def test_observations_of_stored_rows() -> None:
    from promptlab.checks.anomalies import observation_of

    text = 'Here: ```json\n{"category": "bug", "summary": "", "tags": []}\n```'
    obs = observation_of(4, "a", "succeeded", None, "repaired", text)
    assert obs.filled == frozenset({"category"}) and obs.output_chars == len(text)
    # The engine passes the check's value: None (no JSON found) is not parsed again.
    assert observation_of(4, "a", "succeeded", None, "invalid", text, None).filled is None
    assert observation_of(4, "a", "succeeded", None, "truncated", text).filled is None
    failed = observation_of(5, "a", "failed", "timeout", None, None)
    assert not failed.completed and failed.output_chars is None and failed.filled is None
