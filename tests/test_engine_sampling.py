"""Sampling strategies: values over a batch, spec checks, and what reaches the server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promptlab.engine import Engine, parse_spec
from promptlab.errors import SpecError
from promptlab.experiments.sampling import Sampling, parse_sampling
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.providers.config import EndpointConfig
from promptlab.records import RunStatus
from promptlab.store import Store


def test_linear_decay_runs_from_start_to_end_over_the_batch() -> None:
    decay = parse_sampling({"strategy": "linear_decay", "start": 1.0, "end": 0.2}, "v")
    assert decay.param == "temperature"
    values = [decay.value_at(seq, 5) for seq in range(5)]
    assert values == [1.0, 0.8, 0.6, 0.4, 0.2]
    assert decay.value_at(0, 1) == 1.0  # a batch of one gets the start value


def test_cosine_swings_around_its_base_and_is_clipped() -> None:
    cosine = parse_sampling(
        {"strategy": "cosine", "base": 0.9, "amplitude": 0.2, "period": 4, "max": 1.0}, "v"
    )
    assert cosine.param == "top_p"
    # cos(0) = 1 -> 1.1 clipped to 1.0; a quarter period -> base; half -> base - amplitude.
    assert [cosine.value_at(seq, 100) for seq in range(5)] == [1.0, 0.9, 0.7, 0.9, 1.0]


def test_fixed_changes_nothing() -> None:
    fixed = parse_sampling({"strategy": "fixed"}, "v")
    assert fixed == Sampling()
    params = {"temperature": 0.3}
    assert fixed.apply(params, 3, 10) is params


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "variants[0].sampling: expected a mapping"),
        ({"strategy": "random"}, "variants[0].sampling.strategy: one of fixed, linear_decay"),
        ({"strategy": "linear_decay", "start": 1.0}, "variants[0].sampling.end: required"),
        (
            {"strategy": "linear_decay", "start": 3.0, "end": 0.1},
            "variants[0].sampling.start: expected a number from 0 to 2, got 3",
        ),
        (
            {"strategy": "linear_decay", "param": "max_tokens", "start": 1, "end": 2},
            "variants[0].sampling.param: one of temperature, top_p",
        ),
        (
            {"strategy": "cosine", "base": 0.9, "min": 0.95, "max": 0.9},
            "variants[0].sampling: min (0.95) is above max (0.9)",
        ),
        ({"strategy": "cosine", "base": 0.9, "period": 1}, "sampling.period: expected a whole"),
        ({"strategy": "fixed", "start": 1}, "unknown field(s) start"),
        ({"strategy": "cosine", "base": float("nan")}, "sampling.base: expected a number"),
    ],
)
def test_bad_sampling_is_refused_with_its_field(data: Any, message: str) -> None:
    spec = {
        "dataset": "rows.csv",
        "variants": [{"messages": [{"role": "user", "content": "hi"}], "sampling": data}],
    }
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert message in str(err.value)


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with serve_in_thread(FakeLLMConfig(port=0, latency_ms=1, record_requests=100)) as running:
        yield running


def test_each_item_is_sent_and_stored_with_its_scheduled_value(
    store: Store, server: RunningServer, tmp_path: Path
) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("text\n" + "".join(f"row {i}\n" for i in range(11)))
    decay = {"strategy": "linear_decay", "start": 1.0, "end": 0.0}
    spec = parse_spec(
        {
            "dataset": str(rows),
            "variants": [  # two variants: each sweeps the whole schedule over the rows
                {
                    "name": name,
                    "messages": [{"role": "user", "content": f"{verb} {{{{ text }}}}"}],
                    "model": "fake:gpt-4o-mini",
                    "params": {"max_tokens": 20, "top_p": 0.5},
                    "sampling": decay,
                }
                for name, verb in (("say", "Say"), ("echo", "Echo"))
            ],
        }
    )
    endpoints = {
        "fake": EndpointConfig(
            "fake",
            "openai",
            base_url=server.openai_base_url,
            concurrency=1,
            context_windows={"*": 8192},
        )
    }
    with Engine(store, endpoints=endpoints) as engine:
        run_id = engine.submit(spec)
        assert engine.wait(run_id, 60).status == RunStatus.COMPLETED
    # Row i of either variant gets temperature 1 - i/10: the schedule runs over the rows.
    sent = {r["body"]["messages"][0]["content"]: r["body"] for r in server.requests()}
    for i in range(11):
        for verb in ("Say", "Echo"):
            body = sent[f"{verb} row {i}"]
            assert body["temperature"] == pytest.approx(1.0 - i / 10)
            assert body["top_p"] == 0.5  # the param the strategy does not move stays
    with store.read() as cur:
        stored = cur.execute(
            "SELECT row_index, params FROM results WHERE run_id = ? AND variant = 'say' "
            "ORDER BY row_index",
            [run_id],
        ).fetchall()
    assert [json.loads(p)["temperature"] for _, p in stored] == pytest.approx(
        [1.0 - i / 10 for i in range(11)]
    )
    assert all("sampling" not in json.loads(p) for _, p in stored)
