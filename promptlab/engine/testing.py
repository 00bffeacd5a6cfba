"""Fakes with switches for tests and demos of the engine (not mocks).

`ScriptedProvider` implements the Provider protocol for real: it waits its latency,
enforces its own requests-per-minute bucket (answering 429 with retry-after when it is
empty), raises scripted errors, and keeps a history of every request id it saw.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason

#: How often held calls look whether they were released.
HOLD_POLL_S = 0.005
#: Seconds of its rate a scripted server's bucket holds.
SERVER_BURST_S = 1.0


@dataclass
class ScriptedProvider:
    """A provider whose behaviour is set by its fields; see the module docstring."""

    name: str = "fake"
    kind: str = "fake"
    supports_json_schema: bool = False
    latency_s: float = 0.0
    #: Server-side requests-per-minute limit; None means unlimited.
    rpm: int | None = None
    #: Retry-after the server sends with its 429s (None sends no hint).
    retry_after_s: float | None = 0.05
    #: Errors to raise, in order, before answering normally (one per attempt).
    script: deque[ProviderError] = field(default_factory=deque)
    #: Per-request hook: return an error to raise for this request, or None to answer.
    fault: Callable[[CompletionRequest, int], ProviderError | None] | None = None
    #: Raise this (not a ProviderError: an adapter bug) from every call while set.
    bug: Exception | None = None
    #: Per-request answer text (say, per model); None answers `answer to PROMPT`.
    answer: Callable[[CompletionRequest], str] | None = None
    #: Block every call on this event when set (to hold requests in flight).
    hold: asyncio.Event | None = None
    #: While set (`hold_requests`), calls wait until `release_requests` from any thread.
    held: threading.Event | None = None
    calls: Counter[str] = field(default_factory=Counter)
    successes: Counter[str] = field(default_factory=Counter)
    throttled: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    _level: float = 0.0
    _stamp: float = field(default_factory=time.monotonic)

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        key = request.request_id or ""
        self.calls[key] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.hold is not None:
                await self.hold.wait()
            while self.held is not None and self.held.is_set():
                await asyncio.sleep(HOLD_POLL_S)
            if self.rpm is not None and not self._take():
                self.throttled += 1
                raise ProviderError(
                    ErrorKind.RATE_LIMIT,
                    "rate limit reached",
                    status=429,
                    provider=self.name,
                    retry_after_s=self.retry_after_s,
                )
            if self.script:
                raise self.script.popleft()
            if self.fault is not None:
                error = self.fault(request, self.calls[key])
                if error is not None:
                    raise error
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            if self.bug is not None:
                raise self.bug
            self.successes[key] += 1
            text = (
                self.answer(request)
                if self.answer is not None
                else f"answer to {request.messages[-1]['content'][:40]}"
            )
            return CompletionResponse(
                text=text,
                input_tokens=sum(len(m["content"]) // 4 + 1 for m in request.messages),
                output_tokens=len(text) // 4 + 1,
                finish_reason=FinishReason.STOP,
                model_version=f"{request.model}-scripted",
                latency_ms=self.latency_s * 1000,
                headers={},
                request_id=request.request_id,
            )
        finally:
            self.in_flight -= 1

    def hold_requests(self) -> None:
        """From any thread: calls from now on wait in flight until released."""
        self.held = threading.Event()
        self.held.set()

    def release_requests(self) -> None:
        """From any thread: let held calls go on."""
        if self.held is not None:
            self.held.clear()

    def _take(self) -> bool:
        assert self.rpm is not None
        now = time.monotonic()
        rate = self.rpm / 60.0
        capacity = max(1.0, rate * SERVER_BURST_S)
        self._level = min(capacity, self._level + (now - self._stamp) * rate)
        self._stamp = now
        if self._level >= 1.0:
            self._level -= 1.0
            return True
        return False

    async def aclose(self) -> None:
        """Nothing to close."""


class ManualClock:
    """A Clock that moves only when told (`advance`), starting at `start`."""

    def __init__(self, start: datetime = datetime(2030, 1, 1, tzinfo=UTC)) -> None:
        self._start = start
        self._elapsed = 0.0

    def monotonic(self) -> float:
        return self._elapsed

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def advance(self, seconds: float) -> None:
        self._elapsed += seconds
