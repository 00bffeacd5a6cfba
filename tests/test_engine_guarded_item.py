"""One guarded item: whatever goes wrong after the provider answers, the item still gets
exactly one final row and gives its concurrency permit back to the shared limiter.

The provider is real: the SDK adapters against a loopback HTTP server whose answers carry
a usage of nulls (`prompt_tokens: null`, Anthropic's `input_tokens: null`), which the
SDKs hand on as None.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from promptlab.engine import Engine, parse_spec
from promptlab.providers.config import EndpointConfig
from promptlab.store import Store

ROWS = 6
#: Permits of the shared limiter: fewer than the items, so leaked ones would wedge it.
CONCURRENCY = 2


class UsageServer:
    """OpenAI chat completions and Anthropic messages on loopback; while `null_usage` is
    set, every answer's token counts are null."""

    def __init__(self) -> None:
        self.null_usage = True
        self.answered = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def __enter__(self) -> UsageServer:
        self._thread.start()
        assert self._ready.wait(10), "the loopback server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def _tokens(self, real: int) -> int | None:
        self.answered += 1
        return None if self.null_usage else real

    async def _openai(self, request: web.Request) -> web.Response:
        body = await request.json()
        tokens = self._tokens(7)
        usage = {"prompt_tokens": tokens, "completion_tokens": tokens, "total_tokens": tokens}
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "an answer"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    async def _anthropic(self, request: web.Request) -> web.Response:
        body = await request.json()
        tokens = self._tokens(7)
        return web.json_response(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "an answer"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": tokens, "output_tokens": tokens},
            }
        )


@pytest.fixture
def server() -> Iterator[UsageServer]:
    with UsageServer() as running:
        yield running


def final_rows(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    with store.read() as cur:
        return cur.execute(
            "SELECT idempotency_key, status, error_kind, error_message FROM results "
            "WHERE run_id = ?",
            [run_id],
        ).fetchall()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_null_usage_fails_each_item_once_and_leaks_no_permit(
    store: Store, tmp_path: Path, server: UsageServer, kind: str
) -> None:
    base_url = f"{server.base_url}/v1" if kind == "openai" else server.base_url
    endpoint = EndpointConfig(
        "loop", kind, base_url=base_url, concurrency=CONCURRENCY, transport="sdk"
    )
    dataset = tmp_path / "d.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(ROWS)))
    spec = parse_spec(
        {
            "dataset": str(dataset),
            "variants": [
                {
                    "messages": [{"role": "user", "content": "{{ text }}"}],
                    "model": "loop:m1",
                    "params": {"max_tokens": 16},
                }
            ],
            "retry": {"backoff_base_s": 0.01, "backoff_cap_s": 0.02, "timeout_s": 5},
        }
    )
    with Engine(store, endpoints={"loop": endpoint}) as engine:
        first = engine.submit(spec)
        ended = engine.wait(first, timeout=30)
        assert not ended.active and ended.status == "failed", ended
        # Every item failed alike: the run stops as it does on an adapter bug.
        assert (ended.reason or "").startswith("stopped: internal:")
        assert ended.pending == ended.in_flight == 0
        rows = final_rows(store, first)
        assert len(rows) == len({r[0] for r in rows}) == ROWS  # one final row per item
        failed = [r for r in rows if r[1] == "failed"]
        assert failed and {r[2] for r in failed} == {"internal"}
        assert all("NoneType" in r[3] for r in failed)
        assert {r[1] for r in rows} <= {"failed", "cancelled"}
        # Each failed item's result event still carries its render stage.
        with store.read() as cur:
            payloads = cur.execute(
                "SELECT payload FROM audit_events WHERE run_id = ? AND kind = 'result' "
                "AND trace_id IN (SELECT idempotency_key FROM results WHERE run_id = ? "
                "AND error_kind = 'internal')",
                [first, first],
            ).fetchall()
        assert payloads and all('"prompt_hash"' in p[0] for p in payloads), payloads[:1]

        # Every permit is back: a second run on the same endpoint gets through.
        server.null_usage = False
        second = engine.submit(spec)
        done = engine.wait(second, timeout=30)
        assert done.status == "completed" and done.succeeded == ROWS, done
