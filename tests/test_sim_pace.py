"""PROMPTLAB_SIM_PACE: the simulated model's clock against the wall's. A faster pace waits
less and allows more requests a minute, and changes nothing that is recorded."""

from __future__ import annotations

import asyncio

import pytest

from promptlab.errors import ConfigError
from promptlab.providers import build_provider
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import builtin_endpoints, sim_pace

REQUEST = CompletionRequest(
    model="careful",
    messages=({"role": "user", "content": "Summarise: the order arrived late and cold."},),
)


def test_the_pace_is_one_unless_set_and_a_number_over_0_and_at_most_1() -> None:
    assert sim_pace({}) == 1.0
    assert sim_pace({"PROMPTLAB_SIM_PACE": " 0.05 "}) == 0.05
    for bad in ("x", "0", "-0.5", "1.5", "nan", "inf"):
        with pytest.raises(ConfigError, match=r"PROMPTLAB_SIM_PACE: expected a number over 0"):
            sim_pace({"PROMPTLAB_SIM_PACE": bad})


def test_the_built_in_sim_allows_more_requests_a_minute_at_a_faster_pace() -> None:
    assert builtin_endpoints({})["sim"].rpm == 6_000
    assert builtin_endpoints({"PROMPTLAB_SIM_PACE": "0.05"})["sim"].rpm == 120_000
    # The other endpoints keep their limits.
    assert builtin_endpoints({"PROMPTLAB_SIM_PACE": "0.05"})["openai"].rpm == 500


def test_a_faster_pace_waits_less_and_answers_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr("promptlab.providers.sim.asyncio.sleep", no_sleep)
    endpoint = builtin_endpoints({})["sim"]
    answers = [
        asyncio.run(build_provider(endpoint, environ=env).complete(REQUEST))
        for env in ({}, {"PROMPTLAB_SIM_PACE": "0.1"})
    ]
    real, fast = answers
    assert (fast.text, fast.latency_ms, fast.output_tokens) == (
        real.text,
        real.latency_ms,
        real.output_tokens,
    )
    assert waits == pytest.approx([real.latency_ms / 1000, real.latency_ms / 10_000])
