"""One dispatched item's attempts, as one guarded unit: send, retry what may be retried,
re-ask an output that fails its check, stop the run on what no item can get past (quota,
auth, an adapter bug that repeats). Whatever is raised on its way, its permit goes back
to the shared limiter and it gets exactly one final row (engine/record/recorder.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from promptlab.audit.logjson import bind_log_context
from promptlab.checks.validation import Checker, CheckStatus, OutputCheck
from promptlab.clock import Clock
from promptlab.engine.record.recorder import ItemRecorder
from promptlab.engine.record.spill import MAX_OUTPUT_CHARS
from promptlab.engine.send.cache import RunCache
from promptlab.engine.send.lanes import Lane, is_batched
from promptlab.engine.send.limiter import Limiter, Permit
from promptlab.engine.send.refusals import RefusalWatch
from promptlab.engine.send.requests import Prepared
from promptlab.engine.send.retry import THROTTLE_KINDS, Action, RetryPolicy, classify
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.records import ItemErrorKind, ItemStatus, PendingItem

# The run's logger, as before these moved out of engine/run.py: filters keep working.
log = logging.getLogger("promptlab.engine.run")

#: Extra seconds over the policy timeout before the engine itself gives up on a call.
TIMEOUT_GRACE_S = 1.0
WAIT_BACKOFF = "backoff"
#: Internal errors in a row (no success between them) that stop the run: an adapter
#: bug fails every item alike, and a run of them must not "complete" quietly.
INTERNAL_STOP_AFTER = 3
#: The final row of an item whose task ended without one (cancelled on the loop).
CANCELLED_IN_FLIGHT = "cancelled while in flight"


@dataclass
class Flight:
    """A dispatched item until its final row: the permit it holds (None once given back),
    its attempts so far, and how long its current attempt waited for a permit, and why."""

    permit: Permit | None
    attempt: int
    wait_s: float
    wait_reason: str | None

    def hold(self, permit: Permit, wait_s: float, wait_reason: str | None) -> None:
        self.permit, self.wait_s, self.wait_reason = permit, wait_s, wait_reason

    def release(self, limiter: Limiter, used_tokens: int | None) -> None:
        """Give the permit back, once."""
        permit, self.permit = self.permit, None
        if permit is not None:
            limiter.release(permit, used_tokens)


class RunControl(Protocol):
    """What an item's attempts read of their run (engine/run.py), and how they stop it."""

    stopping: asyncio.Event
    paused: bool
    stop_reason: str | None
    cache: RunCache | None

    def stop(self, reason: str) -> None: ...


class ItemAttempts:
    """Sends one run's dispatched items; `run_item` is each item's guarded unit."""

    def __init__(
        self,
        run: RunControl,
        recorder: ItemRecorder,
        checkers: Mapping[int, Checker],
        policy: RetryPolicy,
        clock: Clock,
        *,
        reask: int,
    ) -> None:
        self.run = run
        self.run_id = recorder.run_id
        self.recorder = recorder
        self.checkers = checkers
        self.policy = policy
        self.clock = clock
        #: Follow-up turns per item for an output that failed its check (not truncated).
        self.reask = reask
        self.refusals = RefusalWatch()
        #: Adapter bugs in a row, per endpoint: one broken adapter stops the run even
        #: while another endpoint's answers keep coming.
        self._internal_streak: dict[str, int] = {}

    async def run_item(
        self, item: PendingItem, lane: Lane, prepared: Prepared, permit: Permit
    ) -> None:
        """One dispatched item as one guarded unit: whatever is raised on its way (an
        adapter bug, an answer the engine cannot take in), its permit goes back to the
        shared limiter and it gets exactly one final row."""
        bind_log_context(item_key=item.key)  # its own task (RunExecution._dispatch)
        flight = Flight(permit, item.attempts, permit.waited_s, permit.wait_reason)
        try:
            self.recorder.dispatched(item)
            await self._attempts(item, lane, prepared, flight)
        except Exception as exc:  # noqa: BLE001 - one item's failure must not wedge the run
            if self.recorder.is_open(item):
                internal = (ItemErrorKind.INTERNAL, repr(exc))
                self.recorder.final(item, ItemStatus.FAILED, True, flight.attempt, error=internal)
            self.internal_error(lane, exc)
        finally:
            flight.release(lane.limiter, None)
            if self.recorder.is_open(item):  # the task was cancelled: it ends as cancelled
                cancelled = (None, CANCELLED_IN_FLIGHT)
                self.recorder.final(
                    item, ItemStatus.CANCELLED, True, flight.attempt, error=cancelled
                )

    async def _attempts(
        self, item: PendingItem, lane: Lane, prepared: Prepared, flight: Flight
    ) -> None:
        """Send until the item has its final row: retry what may be retried, stop the run
        on what no item can get past (quota, auth), re-ask an output that fails its check."""
        throttled = 0
        while True:
            flight.attempt += 1
            started_at, t0 = self.clock.now(), self.clock.monotonic()
            waited = flight.wait_s, flight.wait_reason
            try:
                request = prepared.request
                if request.attempt != flight.attempt:  # most items go once, as prepared
                    request = replace(request, attempt=flight.attempt)
                response, error = await self._send(lane, request)
            except Exception:
                # Its row says internal; the guard (`run_item`) ends the item.
                self.recorder.attempt(item, flight.attempt, started_at, t0, None, None, *waited)
                raise
            if response is not None:
                self.recorder.attempt(item, flight.attempt, started_at, t0, response, None, *waited)
                self.refusals.observe(lane.endpoint.name, None)
                await self._answered(item, lane, prepared, flight, response)
                return
            assert error is not None
            epoch = flight.permit.epoch if flight.permit is not None else None
            flight.release(lane.limiter, None)
            lane.limiter.observe_headers(error.headers)
            self.recorder.attempt(item, flight.attempt, started_at, t0, None, error, *waited)
            action = classify(error)
            if error.kind in THROTTLE_KINDS:
                hint = error.retry_after_s
                capped = min(hint, self.policy.max_retry_after_s) if hint is not None else None
                lane.limiter.on_throttle(capped, epoch)
            if self._stops_run(item, lane, flight, error, action):
                return
            if error.kind in THROTTLE_KINDS:
                throttled += 1
            # Throttles are the limiter's business: they only end an item in large numbers.
            counted = flight.attempt - item.attempts - throttled
            if (
                action is Action.FAIL
                or counted >= self.policy.max_attempts
                or throttled >= self.policy.max_throttled_attempts
            ):
                self._failed(item, flight, error)
                return
            if not await self._wait_to_retry(lane, prepared, flight, error):
                stopped = "paused" if self.run.paused else "cancelled"
                message = f"{stopped} before a retry; last error {error}"
                self.recorder.final(
                    item, ItemStatus.CANCELLED, True, flight.attempt, error=(None, message)
                )
                return

    def _stops_run(
        self, item: PendingItem, lane: Lane, flight: Flight, error: ProviderError, action: Action
    ) -> bool:
        """Stop the run, failing the item, on what no item can get past: a quota or auth
        error, or the first requests to an endpoint all refused alike."""
        if action is Action.STOP_RUN:
            self.run.stop(f"{error.kind.value}: {error.provider_message}")
            self._failed(item, flight, error)
            return True
        refused = self.refusals.observe(lane.endpoint.name, error)
        if refused is not None:
            self.run.stop(
                f"{error.kind.value}: the first {self.refusals.limit} requests to "
                f"{lane.endpoint.name} were all refused with the same message, so every "
                f"item would be: {refused}"
            )
            self._failed(item, flight, error)
            return True
        return False

    async def _send(
        self, lane: Lane, request: CompletionRequest
    ) -> tuple[CompletionResponse | None, ProviderError | None]:
        """One call: the answer, or the error (a timeout as one); an adapter bug raises."""
        # A provider batch's line waits for its batch (hours): the batch's own expiry
        # bounds it, and its expired lines come back as timeouts (providers/batches/).
        timeout = None if is_batched(lane) else self.policy.timeout_s + TIMEOUT_GRACE_S
        try:
            # In this task (no task of its own per call, as wait_for would make).
            async with asyncio.timeout(timeout):
                response = await lane.provider.complete(request)
        except ProviderError as exc:
            return None, exc
        except TimeoutError:
            return None, ProviderError(
                ErrorKind.TIMEOUT,
                f"no answer within {self.policy.timeout_s:g} s",
                provider=lane.endpoint.name,
            )
        return response, None

    async def _answered(
        self,
        item: PendingItem,
        lane: Lane,
        prepared: Prepared,
        flight: Flight,
        response: CompletionResponse,
    ) -> None:
        """Take an answer in: the permit back with the tokens used, re-asks, the final row."""
        flight.release(lane.limiter, response.input_tokens + response.output_tokens)
        lane.limiter.observe_headers(response.headers)
        if response.batch_id is not None:  # the item's trace names its batch and line
            self.recorder.batch_line(item, response.batch_id, response.batch_line)
        check = None
        if self.reask and item.variant_index in self.checkers:
            response, check = await self._reask(item, lane, prepared, flight, response)
        if len(response.text) > MAX_OUTPUT_CHARS:  # more than a result row holds
            self.recorder.too_large(item, flight.attempt, response)
            return
        row = self.recorder.final(
            item,
            ItemStatus.SUCCEEDED,
            True,
            flight.attempt,
            response=response,
            endpoint=lane.endpoint,
            check=check,
        )
        if self.run.cache is not None:  # the response cache keeps it (engine/send/cache.py)
            self.run.cache.answered(lane.endpoint, prepared.request, row)
        # Only an item taken in whole ends a streak of internal errors.
        self._internal_streak[lane.endpoint.name] = 0

    def _failed(self, item: PendingItem, flight: Flight, error: ProviderError) -> None:
        described = error.kind.value, str(error)
        self.recorder.final(item, ItemStatus.FAILED, True, flight.attempt, error=described)

    async def _wait_to_retry(
        self, lane: Lane, prepared: Prepared, flight: Flight, error: ProviderError
    ) -> bool:
        """Back off, then hold a new permit; False when the run stops meanwhile.

        Throttles wait at the shared gate; other errors back off on their own.
        """
        delay = 0.0 if error.kind in THROTTLE_KINDS else self.policy.delay_s(error, flight.attempt)
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.run.stopping.wait(), delay)
        if self.run.stopping.is_set():
            return False
        acquire = asyncio.ensure_future(lane.limiter.acquire(prepared.tokens))
        stop_wait = asyncio.ensure_future(self.run.stopping.wait())
        await asyncio.wait({acquire, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        if not acquire.done():
            acquire.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquire
        if acquire.cancelled() or acquire.exception() is not None:
            return False
        permit = acquire.result()
        if self.run.stopping.is_set():
            lane.limiter.release(permit, 0)
            return False
        reason = WAIT_BACKOFF if delay > 0 else permit.wait_reason
        flight.hold(permit, delay + permit.waited_s, reason)
        return True

    async def _reask(
        self,
        item: PendingItem,
        lane: Lane,
        prepared: Prepared,
        flight: Flight,
        response: CompletionResponse,
    ) -> tuple[CompletionResponse, OutputCheck]:
        """While the output is invalid (not truncated) and re-asks are left, send the
        conversation back with the answer and its errors; each turn is its own attempt.

        Re-asks have their own budget: transport errors of a re-ask are not retried, and
        then the last answer stands as the result.
        """
        checker = self.checkers[item.variant_index]
        check = checker.check(response.text, str(response.finish_reason))
        for _ in range(self.reask):
            if check.status is not CheckStatus.INVALID or self.run.stopping.is_set():
                break
            request = replace(
                prepared.request,
                messages=(
                    *prepared.request.messages,
                    {"role": "assistant", "content": response.text},
                    {"role": "user", "content": reask_message(check.errors)},
                ),
            )
            # Rough: the answer and the errors added to what the first request held.
            tokens = (
                prepared.tokens + (len(response.text) + len(request.messages[-1]["content"])) // 3
            )
            permit = await lane.limiter.acquire(tokens)
            flight.hold(permit, permit.waited_s, permit.wait_reason)
            flight.attempt += 1
            request = replace(request, attempt=flight.attempt)
            started_at, t0 = self.clock.now(), self.clock.monotonic()
            answer: CompletionResponse | None = None
            error: ProviderError | None = None
            try:
                answer, error = await self._send(lane, request)
            except Exception:  # noqa: BLE001 - an adapter bug ends the re-asks, not the item
                log.warning("run %s: a re-ask failed", self.run_id, exc_info=True)
            waited = flight.wait_s, flight.wait_reason
            if answer is None:
                flight.release(lane.limiter, None)
                if error is not None:
                    lane.limiter.observe_headers(error.headers)
                self.recorder.attempt(
                    item, flight.attempt, started_at, t0, None, error, *waited, reask=True
                )
                break
            self.recorder.attempt(
                item, flight.attempt, started_at, t0, answer, None, *waited, reask=True
            )
            flight.release(lane.limiter, answer.input_tokens + answer.output_tokens)
            lane.limiter.observe_headers(answer.headers)
            response = answer
            check = checker.check(response.text, str(response.finish_reason))
        return response, check

    def internal_error(self, lane: Lane, exc: Exception) -> None:
        """Count an adapter bug; log its traceback once, stop the run when it repeats."""
        streak = self._internal_streak.get(lane.endpoint.name, 0) + 1
        self._internal_streak[lane.endpoint.name] = streak
        if streak == 1:
            log.error(
                "run %s: the %s adapter raised", self.run_id, lane.endpoint.name, exc_info=exc
            )
        if streak >= INTERNAL_STOP_AFTER and self.run.stop_reason is None:
            self.run.stop(
                f"{ItemErrorKind.INTERNAL}: the {lane.endpoint.name} adapter failed "
                f"{streak} items in a row with {exc!r}"
            )


#: Error paths listed in a re-ask; the rest are counted (a long list helps no model).
REASK_ERRORS_LISTED = 20


def reask_message(errors: Sequence[str]) -> str:
    """The follow-up user turn: what was wrong with the answer, by JSONPath."""
    listed = "\n".join(f"- {e}" for e in errors[:REASK_ERRORS_LISTED])
    more = len(errors) - REASK_ERRORS_LISTED
    tail = f"\n- and {more} more" if more > 0 else ""
    return (
        "Your answer does not fit the required JSON schema:\n"
        f"{listed}{tail}\n"
        "Reply again with only the corrected JSON."
    )
