"""A live call sent through the engine's endpoint: its shared limiter, its retries.

The engine keeps one provider and one limiter per endpoint for the process
(engine/lanes.py), so live calls and batch runs on an endpoint draw on one budget. A
call runs on the engine's loop, where its provider's connections live, and hands each
text piece to the caller's loop as it arrives. It is retried on what the engine would
retry (engine/retry.py's classes), and only before its first piece: after that the
caller has passed text on. Throttles wait at the limiter's shared gate.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from promptlab.engine.lanes import LiveLane
from promptlab.engine.retry import THROTTLE_KINDS, Action, RetryPolicy, classify
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse, Provider
from promptlab.providers.streaming import stream_completion

#: A live call's retries: an application is waiting, so fewer and shorter than a run's.
LIVE_POLICY = RetryPolicy(max_attempts=3, max_throttled_attempts=5, backoff_cap_s=2.0)


class LiveLanes(Protocol):
    """Where live calls get their lanes: the engine (engine/executor.py)."""

    def live_lane(self, endpoint: str) -> LiveLane: ...


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
) -> Sent:
    """Send `request` on `lane` (on its loop); `deliver` gets each piece (None: the call
    is not streamed, so neither is the request); ProviderError when it cannot be
    answered."""
    tokens = request.max_tokens + sum(len(m.get("content", "")) for m in request.messages) // 4
    attempt = throttled = 0
    while True:
        attempt += 1
        permit = await lane.limiter.acquire(tokens)
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
            lane.limiter.release(permit, None)
            lane.limiter.observe_headers(error.headers)
            if error.kind in THROTTLE_KINDS:
                throttled += 1
                lane.limiter.on_throttle(error.retry_after_s, permit.epoch)
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
        lane.limiter.release(permit, answer.input_tokens + answer.output_tokens)
        lane.limiter.observe_headers(answer.headers)
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
