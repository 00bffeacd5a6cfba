"""A live call sent through the engine's endpoint budget: its shared limiter, its retries.

The engine keeps one limiter per endpoint for the process (engine/send/lanes.py), so live
calls and batch runs on an endpoint draw on one budget. A call runs on the gateway's
own loop, where the caller's request is read and its answer written, with a provider
of the gateway's: a stream's pieces go from the provider's connection to the caller's
without crossing threads. Only the limiter is the engine loop's: a permit is asked for
there and given back there (EngineLimiter), two hops per attempt. A call is retried on
what the engine would retry (engine/send/retry.py's classes), and only before its first
piece: after that the caller has passed text on. Throttles wait at the shared gate.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from promptlab.engine.send.lanes import LiveLane
from promptlab.engine.send.retry import THROTTLE_KINDS, Action, RetryPolicy, classify
from promptlab.engine.send.tokenbucket import Permit
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse, Provider
from promptlab.providers.streaming import stream_completion

#: A live call's retries: an application is waiting, so fewer and shorter than a run's.
LIVE_POLICY = RetryPolicy(max_attempts=3, max_throttled_attempts=5, backoff_cap_s=2.0)


class LiveLanes(Protocol):
    """Where live calls get their lanes: the engine (engine/executor.py)."""

    def live_lane(self, endpoint: str) -> LiveLane: ...


class EngineLimiter:
    """An endpoint's shared limiter, used from the gateway's loop: a permit is awaited on
    the engine's loop, where the limiter lives; what it is told after is posted there."""

    def __init__(self, lane: LiveLane) -> None:
        self._limiter = lane.limiter
        self._loop = lane.loop

    async def acquire(self, tokens: int) -> Permit:
        asked = asyncio.run_coroutine_threadsafe(self._limiter.acquire(tokens), self._loop)
        try:
            return await asyncio.wrap_future(asked)
        except asyncio.CancelledError:
            # The caller went away: a permit granted meanwhile goes back, not lost.
            asked.add_done_callback(self._give_back)
            raise

    def release(self, permit: Permit, used_tokens: int | None) -> None:
        self._loop.call_soon_threadsafe(self._limiter.release, permit, used_tokens)

    def observe_headers(self, headers: Mapping[str, str]) -> None:
        if headers:
            self._loop.call_soon_threadsafe(self._limiter.observe_headers, headers)

    def on_throttle(self, retry_after_s: float | None, epoch: int | None) -> None:
        self._loop.call_soon_threadsafe(self._limiter.on_throttle, retry_after_s, epoch)

    def _give_back(self, asked: concurrent.futures.Future[Permit]) -> None:
        if not asked.cancelled() and asked.exception() is None:
            self.release(asked.result(), None)


@dataclass
class Tally:
    """A call's attempts so far: what its record says of it, answered or not."""

    attempts: int = 0


@dataclass
class Sent:
    """The answer, and when its first piece came (perf_counter seconds; None: no text)."""

    answer: CompletionResponse
    first_piece_at: float | None
    attempts: int


async def send_live(
    lane: LiveLane,
    request: CompletionRequest,
    deliver: Callable[[str], None] | None,
    clock: Callable[[], float],
    policy: RetryPolicy = LIVE_POLICY,
    tally: Tally | None = None,
) -> Sent:
    """Send `request` with `lane`'s provider, on the caller's loop; `deliver` gets each
    piece (None: the call is not streamed, so neither is the request); ProviderError
    when it cannot be answered."""
    tokens = request.max_tokens + sum(len(m.get("content", "")) for m in request.messages) // 4
    limiter = EngineLimiter(lane)
    attempt = throttled = 0
    tally = tally if tally is not None else Tally()
    while True:
        attempt += 1
        tally.attempts = attempt
        permit = await limiter.acquire(tokens)
        first_piece_at: float | None = None
        try:
            async with asyncio.timeout(policy.timeout_s):
                async for piece in _pieces(lane.provider, request, streamed=deliver is not None):
                    if isinstance(piece, CompletionResponse):
                        answer = piece
                    else:
                        if first_piece_at is None:
                            first_piece_at = clock()
                        if deliver is not None:
                            deliver(piece)
        except (ProviderError, TimeoutError) as raised:
            error = _as_provider_error(raised, lane, policy)
            limiter.release(permit, None)
            limiter.observe_headers(error.headers)
            if error.kind in THROTTLE_KINDS:
                throttled += 1
                limiter.on_throttle(error.retry_after_s, permit.epoch)
            counted = attempt - throttled
            if (
                first_piece_at is not None
                or classify(error) is not Action.RETRY
                or counted >= policy.max_attempts
                or throttled >= policy.max_throttled_attempts
            ):
                raise error from None
            if error.kind not in THROTTLE_KINDS:
                await asyncio.sleep(policy.delay_s(error, attempt))
            continue
        limiter.release(permit, answer.input_tokens + answer.output_tokens)
        limiter.observe_headers(answer.headers)
        return Sent(answer, first_piece_at, attempt)


async def _pieces(
    provider: Provider, request: CompletionRequest, streamed: bool
) -> AsyncIterator[str | CompletionResponse]:
    if streamed:
        async for piece in stream_completion(provider, request):
            yield piece
    else:
        yield await provider.complete(request)


def _as_provider_error(
    raised: ProviderError | TimeoutError, lane: LiveLane, policy: RetryPolicy
) -> ProviderError:
    if isinstance(raised, ProviderError):
        return raised
    return ProviderError(
        ErrorKind.TIMEOUT,
        f"no answer within {policy.timeout_s:g} s",
        provider=lane.endpoint.name,
    )
