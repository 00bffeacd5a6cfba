"""Re-ask: an invalid output (not a truncated one) goes back to the model once with its
errors, as its own attempt; the answer to that is checked and stored as the result."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from promptlab.checks.validation import check_output
from promptlab.engine import Engine, parse_spec
from promptlab.errors import SpecError
from promptlab.providers import build_provider
from promptlab.providers.base import CompletionRequest, CompletionResponse, Provider
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store
from tests.test_engine_checks import MESSAGES, SCHEMA

ROWS = 150


@dataclass
class Recording:
    """The real simulated provider, keeping every request with the text it answered."""

    inner: Provider
    seen: list[tuple[CompletionRequest, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def kind(self) -> str:
        return self.inner.kind

    @property
    def supports_json_schema(self) -> bool:
        return self.inner.supports_json_schema

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        response = await self.inner.complete(request)
        self.seen.append((request, response.text))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def spec_data(tmp_path: Path, reask: int) -> dict[str, Any]:
    dataset = tmp_path / "tickets.jsonl"
    dataset.write_text(
        "".join(json.dumps({"ticket": f"ticket number {i}"}) + "\n" for i in range(ROWS))
    )
    return {
        "name": f"reask-{reask}",
        "dataset": str(dataset),
        "reask": reask,
        "variants": [
            {
                "name": "json",
                "messages": MESSAGES,
                "model": "quick:sloppy",
                "params": {"max_tokens": 200, "temperature": 1.0},
                "output_schema": SCHEMA,
            }
        ],
    }


def run(tmp_path: Path, store: Store, reask: int) -> tuple[str, Recording]:
    endpoints = {"quick": EndpointConfig(name="quick", kind="sim", latency_scale=0)}
    provider = Recording(build_provider(endpoints["quick"]))
    with Engine(store, endpoints=endpoints, provider_factory=lambda _c: provider) as engine:
        run_id = engine.submit(parse_spec(spec_data(tmp_path, reask)))
        assert engine.wait(run_id, timeout=60).status == "completed"
    return run_id, provider


def results(store: Store, run_id: str) -> dict[str, tuple[Any, ...]]:
    with store.read() as cur:
        rows = cur.execute(
            "SELECT idempotency_key, output_text, check_status, attempts FROM results "
            "WHERE run_id = ?",
            [run_id],
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def attempts(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    with store.read() as cur:
        return cur.execute(
            "SELECT idempotency_key, attempt, outcome, reask FROM attempts WHERE run_id = ? "
            "ORDER BY idempotency_key, attempt",
            [run_id],
        ).fetchall()


def test_invalid_outputs_are_asked_again_once(tmp_path: Path, store: Store) -> None:
    plain_id, _ = run(tmp_path, store, reask=0)
    before = Counter(r[1] for r in results(store, plain_id).values())
    assert before["invalid"] > 0 and before["truncated"] > 0
    assert not any(a[3] for a in attempts(store, plain_id))

    run_id, provider = run(tmp_path, store, reask=1)
    stored = results(store, run_id)
    reasks = [a for a in attempts(store, run_id) if a[3]]
    # The sim answers the same request the same way: exactly the invalid ones (not the
    # truncated ones) of the run without re-ask were asked again, each as attempt 2.
    assert len(reasks) == before["invalid"]
    assert all(a[1] == 2 and a[2] == "ok" for a in reasks)
    assert {stored[a[0]][1] for a in reasks} <= {"valid", "repaired", "invalid", "truncated"}
    assert all(stored[a[0]][2] == 2 for a in reasks)  # attempts on the result
    follow_ups = [(r, text) for r, text in provider.seen if len(r.messages) == 3]
    assert len(follow_ups) == len(reasks)
    for request, answer in follow_ups:
        first, said, ask = request.messages
        assert first["role"] == "user" and said["role"] == "assistant"
        # The answer sent back failed its check, and its errors are listed by path.
        check = check_output(said["content"], SCHEMA, "stop")
        assert check.status.value == "invalid"
        assert ask["role"] == "user" and "does not fit the required JSON schema" in ask["content"]
        assert all(f"- {e}" in ask["content"] for e in check.errors)
        # The re-asked answer is the stored result, checked.
        assert stored[request.request_id or ""][0] == answer
    after = Counter(r[1] for r in stored.values())
    assert after["invalid"] < before["invalid"] / 2  # most fixed on the second turn
    # Truncated outputs are not re-asked; a re-asked answer may come back cut off.
    cut_on_reask = sum(stored[a[0]][1] == "truncated" for a in reasks)
    assert after["truncated"] == before["truncated"] + cut_on_reask
    assert sum(after.values()) == ROWS


@pytest.mark.parametrize("value", [-1, 4, True, "1", 1.5])
def test_reask_must_be_a_small_whole_number(tmp_path: Path, value: Any) -> None:
    with pytest.raises(SpecError, match=r"^reask: expected a whole number from 0 to 3"):
        parse_spec(spec_data(tmp_path, value))
