"""A successful attempt stores the HTTP status its answer came with (200), through the
real SDKs and the lean HTTP adapters against fakellm; the simulated model, which answers
over no HTTP, stores none."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from promptlab.engine import Engine, parse_spec
from promptlab.fakellm.server import RunningServer
from promptlab.providers import CompletionRequest, build_provider
from promptlab.store import Store
from tests.fakellm_fixtures import TEST_KEY, endpoint_for, fakellm

__all__ = ["fakellm"]  # a fixture, imported for pytest

REQUEST = CompletionRequest(model="gpt-4o-mini", messages=({"role": "user", "content": "Hi"},))


@pytest.mark.parametrize("transport", ["sdk", "http"])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_answer_carries_its_http_status(
    fakellm: RunningServer, kind: str, transport: str
) -> None:
    endpoint = endpoint_for(fakellm, kind, transport=transport)
    provider = build_provider(endpoint, environ={"FAKELLM_KEY": TEST_KEY})

    async def send() -> int | None:
        try:
            return (await provider.complete(REQUEST)).http_status
        finally:
            await provider.aclose()

    assert asyncio.run(send()) == 200


def attempt_statuses(db_path: Path, tmp_path: Path, model: str, endpoints: dict) -> list:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(5)))
    spec = parse_spec(
        {
            "name": "statuses",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "v",
                    "model": model,
                    "messages": [{"role": "user", "content": "{{ text }}"}],
                }
            ],
        }
    )
    with Store(db_path) as store, Engine(store, endpoints=endpoints) as engine:
        run_id = engine.submit(spec)
        assert engine.wait(run_id, timeout=120).status == "completed"
        with store.read() as cur:
            return cur.execute(
                "SELECT outcome, http_status FROM attempts WHERE run_id = ?", [run_id]
            ).fetchall()


def test_a_successful_attempt_stores_200_through_the_official_sdk(
    tmp_path: Path, db_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKELLM_KEY", TEST_KEY)
    endpoints = {"fake-openai": endpoint_for(fakellm, "openai", transport="sdk")}
    rows = attempt_statuses(db_path, tmp_path, "fake-openai:gpt-4o-mini", endpoints)
    assert rows == [("ok", 200)] * 5


def test_the_simulated_model_stores_no_http_status(tmp_path: Path, db_path: Path) -> None:
    rows = attempt_statuses(db_path, tmp_path, "sim:fast", {})
    assert rows == [("ok", None)] * 5
