"""A small server of the sample wire format, for tests (it runs on loopback only).

`FakeSampleServer` answers `POST /generate` with `echo: ` and the prompt's last line,
counts its tokens as words, refuses a wrong bearer token with 401, and answers 429
(Retry-After: 0) to the first request whose prompt holds `slow down`. It records every
Authorization header it saw.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web


class FakeSampleServer:
    """Start with `with FakeSampleServer(key) as server:`; `server.url` is its base URL."""

    def __init__(self, key: str | None = None) -> None:
        self.key = key
        self.authorizations: list[str | None] = []
        self.throttled: set[str] = set()
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> FakeSampleServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *_exc: Any) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def _generate(self, request: web.Request) -> web.Response:
        given = request.headers.get("Authorization")
        self.authorizations.append(given)
        if self.key is not None and given != f"Bearer {self.key}":
            return web.json_response({"error": "wrong key"}, status=401)
        body = await request.json()
        prompt = str(body["prompt"])
        if "slow down" in prompt and prompt not in self.throttled:
            self.throttled.add(prompt)
            return web.json_response(
                {"error": "too many"}, status=429, headers={"Retry-After": "0"}
            )
        last = prompt.splitlines()[-1].split(": ", 1)[-1]
        text = f"echo: {last}"
        return web.json_response(
            {
                "text": text,
                "tokens_in": len(prompt.split()),
                "tokens_out": len(text.split()),
                "stop": "end",
            }
        )
