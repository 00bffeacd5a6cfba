"""The best hand-written peer for bench/executor.py: aiohttp + aiolimiter + tenacity.

What a careful engineer writes by hand for a rate-limited batch: a semaphore for
concurrency, `aiolimiter` buckets for requests and tokens per minute, and `tenacity`
retries that honour the server's retry-after. It stores nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiolimiter import AsyncLimiter
from tenacity import (
    RetryCallState,
    retry,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

#: The peer's limiter window: one second of the per-minute budget, so it never bursts
#: more than a second's worth. A 60 s window (`AsyncLimiter(rpm)`) bursts a whole minute:
#: in rpm at --scale 0.5 it finished as fast as the engine but drew ~63% 429s and failed
#: a few items after 6 attempts; this one draws none and forgoes the server's burst.
PEER_WINDOW_S = 1.0
#: The peer's retries: the OpenAI cookbook's tenacity recipe (6 attempts, random exponential
#: waits), with shorter waits than its 1-60 s since the server is local.
PEER_ATTEMPTS, PEER_BACKOFF_BASE_S, PEER_BACKOFF_MAX_S = 6, 0.5, 20.0


class RetryableStatus(Exception):
    """A 429 or 5xx answer, with the server's retry-after when it sent one."""

    def __init__(self, status: int, retry_after_s: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.retry_after_s = retry_after_s


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """`retry-after-ms`, else `retry-after` in seconds; None when absent or a date."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        with contextlib.suppress(KeyError, ValueError):
            return float(headers[name]) * scale
    return None


def wait_retry_after_or_backoff(state: RetryCallState) -> float:
    """Jittered exponential backoff, but never less than the server's retry-after."""
    backoff = wait_random_exponential(multiplier=PEER_BACKOFF_BASE_S, max=PEER_BACKOFF_MAX_S)
    exc = state.outcome.exception() if state.outcome else None
    hinted = exc.retry_after_s if isinstance(exc, RetryableStatus) else None
    return max(hinted or 0.0, backoff(state))


class Peer:
    """aiohttp + aiolimiter + tenacity + a semaphore, as a careful engineer writes it."""

    def __init__(
        self,
        base: str,
        *,
        model: str,
        concurrency: int,
        max_tokens: int,
        rpm: int | None = None,
        tpm: int | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        self.url = f"{base}/v1/chat/completions"
        self.gate = asyncio.Semaphore(concurrency)
        self.max_tokens = max_tokens
        self.model = model
        self.requests = AsyncLimiter(rpm / 60 * PEER_WINDOW_S, PEER_WINDOW_S) if rpm else None
        self.tokens = AsyncLimiter(tpm / 60 * PEER_WINDOW_S, PEER_WINDOW_S) if tpm else None
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)

    @retry(
        stop=stop_after_attempt(PEER_ATTEMPTS),
        wait=wait_retry_after_or_backoff,
        retry=retry_if_exception_type((RetryableStatus, aiohttp.ClientError, TimeoutError)),
        reraise=True,
    )
    async def complete(self, session: aiohttp.ClientSession, text: str) -> None:
        from promptlab.providers.tokens import estimate_prompt_tokens  # the count fakellm charges

        messages = [{"role": "user", "content": text}]
        body = {"model": self.model, "messages": messages, "max_tokens": self.max_tokens}
        async with self.gate:  # in flight only: a backoff sleep holds no slot
            if self.requests:
                await self.requests.acquire()
            if self.tokens:
                await self.tokens.acquire(estimate_prompt_tokens(messages) + self.max_tokens)
            async with session.post(self.url, json=body, timeout=self.timeout) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise RetryableStatus(resp.status, retry_after_s(resp.headers))
                resp.raise_for_status()
                await resp.json()

    async def run(self, texts: list[str]) -> dict[str, Any]:
        times: list[float] = []
        connector = aiohttp.TCPConnector(limit=0)  # the semaphore is the limit
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one(text: str) -> None:
                with contextlib.suppress(RetryableStatus, aiohttp.ClientError, TimeoutError):
                    await self.complete(session, text)
                    times.append(time.time())

            t0 = time.monotonic()
            await asyncio.gather(*(one(t) for t in texts))
            wall = time.monotonic() - t0
        ok = len(times)
        return {"ok": ok, "failed": len(texts) - ok, "lost": 0, "wall": wall, "times": times}
