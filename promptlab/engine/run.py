"""One run's execution on the engine loop: stream items, dispatch, retry, record.

Each dispatched item runs as one guarded unit (`RunExecution._run_item`): whatever is
raised on its way, its permit goes back to the shared limiter and it gets exactly one
final row. What items leave behind is recorded by engine/recorder.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from promptlab.audit.chain import Masker
from promptlab.audit.redact import Redactor
from promptlab.checks.validation import Checker, CheckStatus, OutputCheck, checker_for
from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.data.conversations import turn_of
from promptlab.engine.chains import Blocked, SessionChains, Stopped
from promptlab.engine.histories import SessionHistories
from promptlab.engine.lanes import Lane
from promptlab.engine.limiter import Limiter, Permit
from promptlab.engine.progress import Counters
from promptlab.engine.recorder import ItemRecorder
from promptlab.engine.refusals import RefusalWatch
from promptlab.engine.requests import Prepared, RequestBuilder
from promptlab.engine.retry import THROTTLE_KINDS, Action, RetryPolicy, classify
from promptlab.engine.shards import Replay, Sharding, SummaryFailed
from promptlab.engine.spec import AS_WRITTEN
from promptlab.engine.writer import BatchWriter
from promptlab.errors import ErrorKind, ProviderError
from promptlab.prompts.templates import Template
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.records import AlertRecord, ItemErrorKind, ItemStatus, PendingItem, VariantRecord
from promptlab.store.items import ItemStore
from promptlab.store.sessions import SessionReads
from promptlab.store.shards import ShardStore

log = logging.getLogger(__name__)

#: Items read from the store per query; two chunks per endpoint are in memory at most.
CHUNK_SIZE = 1_000
#: Extra seconds over the policy timeout before the engine itself gives up on a call.
TIMEOUT_GRACE_S = 1.0
WAIT_BACKOFF = "backoff"
#: Internal errors in a row (no success between them) that stop the run: an adapter
#: bug fails every item alike, and a run of them must not "complete" quietly.
INTERNAL_STOP_AFTER = 3
#: The final row of an item whose task ended without one (cancelled on the loop).
CANCELLED_IN_FLIGHT = "cancelled while in flight"
#: Replayed turns read but waiting for their session's previous turn (history:
#: generated); the feeder reads on only while fewer wait.
MAX_WAITING_TURNS = 2 * CHUNK_SIZE


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


class RunExecution:
    """Drives one run to its end; `cancel` and `stop` may be called from the loop."""

    def __init__(
        self,
        run_id: str,
        variants: Sequence[VariantRecord],
        lanes: Sequence[Lane],
        policy: RetryPolicy,
        items: ItemStore,
        writer: BatchWriter,
        counters: Counters,
        clock: Clock = SYSTEM_CLOCK,
        *,
        repeats: int = 1,
        rows: int | None = None,
        alert_sink: Callable[[list[AlertRecord]], None] | None = None,
        reask: int = 0,
        audit: bool = True,
        masker: Masker | None = None,
        top_logprobs: int | None = None,
        replay: Replay | None = None,
    ) -> None:
        self.run_id = run_id
        self.clock = clock
        self.variants = {v.index: v for v in variants}
        self.templates = {
            v.index: Template.from_canonical(v.template)
            for v in variants
            if not v.template.get(AS_WRITTEN)
        }
        #: Compiled output checks of variants whose template has an output schema or
        #: rules (rules need the output parsed: with no schema, any JSON fits).
        self.checkers: dict[int, Checker] = {
            index: checker_for(template.output_schema or {})
            for index, template in self.templates.items()
            if template.output_schema is not None or template.rules
        }
        self.lanes = list(lanes)
        self.refusals = RefusalWatch()
        self.policy = policy
        self.items = items
        self.writer = writer
        self.stopping = asyncio.Event()
        self.cancelled = False
        #: Stopped to be resumed later: open items stay open (see `pause`).
        self.paused = False
        self.stop_reason: str | None = None
        self._feeders: list[asyncio.Task[None]] = []
        self._items: set[asyncio.Task[None]] = set()
        #: Secrets are masked in what the store keeps (store/items.py), so what a next
        #: turn carries (an answer, a summary) is masked alike, live or resumed.
        self._redact = Redactor.from_environ()
        generated = replay is not None and replay.history == "generated"
        self.chains = SessionChains(self._turn_answers) if generated else None
        #: Replayed turns waiting for the turn before or for their shard's summary
        #: (cancelled on a halt: they were never sent, so they stay pending).
        self._waiting: set[asyncio.Task[None]] = set()
        self._waiting_room = asyncio.Semaphore(MAX_WAITING_TURNS)
        #: Adapter bugs in a row, per endpoint: one broken adapter stops the run even
        #: while another endpoint's answers keep coming.
        self._internal_streak: dict[str, int] = {}
        #: Follow-up turns per item for an output that failed its check (not truncated).
        self.reask = reask
        self.recorder = ItemRecorder(
            run_id, self.variants, self.templates, self.checkers, writer, counters, clock,
            alert_sink=alert_sink, reask=reask, audit=audit, masker=masker,
            on_final=self._finished if self.chains is not None else None,
        )  # fmt: skip
        #: A replay's context shards: its turns' histories cut to fit the window.
        self.sharding = (
            Sharding(run_id, replay.shards, replay.summary, ShardStore(items.store), writer,
                     policy, clock, audit=audit, masker=masker, redact=self._redact)
            if replay is not None else None
        )  # fmt: skip
        #: A replay's logged histories, built as its turns are sent (engine/histories.py).
        self.histories = SessionHistories(self._turn_rows) if replay is not None else None
        self.requests = RequestBuilder(
            self.variants, self.templates, self.recorder, policy.timeout_s,
            self.sharding, self.histories, repeats=repeats, top_logprobs=top_logprobs,
            positions=(rows if rows is not None else counters.total) * repeats,
        )  # fmt: skip

    # ---- control -------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop new dispatches now; in-flight requests finish or time out."""
        self.cancelled = True
        self._halt()

    def pause(self) -> None:
        """Stop new dispatches now, like `cancel`, but the run ends paused: in-flight
        requests finish and pending items stay pending for `resume`."""
        self.paused = True
        self._halt()

    def stop(self, reason: str) -> None:
        """Stop the run because of an error no item can get past (quota, auth)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._halt()

    def _halt(self) -> None:
        self.stopping.set()
        for task in [*self._feeders, *self._waiting]:
            task.cancel()
        if self.sharding is not None:
            self.sharding.cancel()  # summaries no turn waits for any more

    # ---- the run -------------------------------------------------------------------

    async def execute(self) -> None:
        """Feed every lane, wait for the last item, flush; the caller sets the final status."""
        if self.sharding is not None:
            await self.sharding.prune()  # shards past their TTL, of any run
        self._feeders = [
            asyncio.create_task(self._feed(lane), name=f"feed-{self.run_id}-{lane.endpoint.name}")
            for lane in self.lanes
        ]
        if self.stopping.is_set():
            self._halt()
        results = await asyncio.gather(*self._feeders, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                self.stop(f"internal error: {result!r}")
                log.error("feeder failed", exc_info=result)
        while self._items or self._waiting:
            await asyncio.gather(*self._items, *self._waiting, return_exceptions=True)
        if self.sharding is not None:
            await self.sharding.flush()
        # False when the store cannot write: the caller records the end as it can.
        await self.writer.flush()

    async def _feed(self, lane: Lane) -> None:
        after = -1
        next_chunk = asyncio.create_task(self._read(after, lane))
        try:
            while not self.stopping.is_set():
                chunk = await next_chunk
                if not chunk:
                    return
                after = chunk[-1].seq
                # Read the next chunk while this one is dispatched.
                next_chunk = asyncio.create_task(self._read(after, lane))
                for item in chunk:
                    if self.stopping.is_set():
                        return
                    # Backpressure: while the store cannot write, nothing new is sent;
                    # once it has given up, the run stops with the store's message.
                    gave_up = await self.writer.wait_writable()
                    if gave_up is not None:
                        self.stop(f"store: {gave_up}")
                        return
                    if self.chains is not None:
                        self.chains.register(item)
                    if turn_of(item.values) > 0 and (self.chains or self.requests.summarizes):
                        await self._wait_for_turn(item, lane)
                        continue
                    # Nothing here waits: a turn that may need a summary made went above.
                    prepared = await self.requests.prepare(item, lane)
                    if prepared is None:
                        continue
                    permit = await lane.limiter.acquire(prepared.tokens)
                    self._dispatch(item, lane, prepared, permit)
        finally:
            next_chunk.cancel()

    def _dispatch(self, item: PendingItem, lane: Lane, prepared: Prepared, permit: Permit) -> None:
        task = asyncio.create_task(self._run_item(item, lane, prepared, permit))
        self._items.add(task)
        task.add_done_callback(self._items.discard)

    async def _wait_for_turn(self, item: PendingItem, lane: Lane) -> None:
        """Hold a replayed turn until its session's previous turn has its answer (history:
        generated) and its shard's summary is made, then send it; the feeder reads on."""
        await self._waiting_room.acquire()
        task = asyncio.create_task(self._turn(item, lane))
        self._waiting.add(task)
        task.add_done_callback(self._waiting.discard)

    async def _turn(self, item: PendingItem, lane: Lane) -> None:
        try:
            answers = await self.chains.answers(item) if self.chains is not None else None
            prepared = await self.requests.prepare(item, lane, answers)
            if prepared is None:
                return
            permit = await lane.limiter.acquire(prepared.tokens)
        except Stopped:
            return
        except Blocked as exc:
            error = (ItemErrorKind.NO_HISTORY, str(exc))
            self.recorder.final(item, ItemStatus.FAILED, False, error=error)
            return
        except SummaryFailed as exc:
            if exc.stops_run:  # quota, auth: no item gets past it; the turn stays pending
                self.stop(str(exc))
                return
            said = f"the summary its context shard carries could not be made: {exc}"
            error = (ItemErrorKind.NO_SUMMARY, said)
            self.recorder.final(item, ItemStatus.FAILED, False, error=error)
            return
        except Exception as exc:  # noqa: BLE001 - its session's next turn waits for its row
            internal = (ItemErrorKind.INTERNAL, repr(exc))
            self.recorder.final(item, ItemStatus.FAILED, False, error=internal)
            self._internal_error(lane, exc)
            return
        finally:
            self._waiting_room.release()
        # No await from the permit to the item's own task: a halt cannot cut between.
        self._dispatch(item, lane, prepared, permit)

    def _finished(self, item: PendingItem, status: str, output: str | None) -> None:
        """A final row: the next turn of its session is sent with the answer as stored."""
        assert self.chains is not None
        self.chains.finished(item, status, self._redact.optional(output))

    async def _turn_answers(
        self, variant_index: int, repeat: int, first_row: int, rows: int
    ) -> Mapping[int, str]:
        return await asyncio.to_thread(
            self.items.turn_answers, self.run_id, variant_index, repeat, first_row, rows
        )

    async def _turn_rows(self, first_row: int, last_row: int) -> list[dict[str, Any]]:
        return await asyncio.to_thread(
            SessionReads(self.items.store).turn_rows, self.run_id, first_row, last_row
        )

    async def _read(self, after: int, lane: Lane) -> list[PendingItem]:
        return await asyncio.to_thread(
            self.items.pending_chunk, self.run_id, after, lane.variant_indexes, CHUNK_SIZE
        )

    # ---- one item ------------------------------------------------------------------

    async def _run_item(
        self, item: PendingItem, lane: Lane, prepared: Prepared, permit: Permit
    ) -> None:
        """One dispatched item as one guarded unit: whatever is raised on its way (an
        adapter bug, an answer the engine cannot take in), its permit goes back to the
        shared limiter and it gets exactly one final row."""
        flight = Flight(permit, item.attempts, permit.waited_s, permit.wait_reason)
        try:
            self.recorder.dispatched(item)
            await self._attempts(item, lane, prepared, flight)
        except Exception as exc:  # noqa: BLE001 - one item's failure must not wedge the run
            if self.recorder.is_open(item):
                internal = (ItemErrorKind.INTERNAL, repr(exc))
                self.recorder.final(item, ItemStatus.FAILED, True, flight.attempt, error=internal)
            self._internal_error(lane, exc)
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
                request = replace(prepared.request, attempt=flight.attempt)
                response, error = await self._send(lane, request)
            except Exception:
                # Its row says internal; the guard (`_run_item`) ends the item.
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
            if action is Action.STOP_RUN:
                self.stop(f"{error.kind.value}: {error.provider_message}")
                self._failed(item, flight, error)
                return
            refused = self.refusals.observe(lane.endpoint.name, error)
            if refused is not None:
                self.stop(
                    f"{error.kind.value}: the first {self.refusals.limit} requests to "
                    f"{lane.endpoint.name} were all refused with the same message, so every "
                    f"item would be: {refused}"
                )
                self._failed(item, flight, error)
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
                stopped = "paused" if self.paused else "cancelled"
                message = f"{stopped} before a retry; last error {error}"
                self.recorder.final(
                    item, ItemStatus.CANCELLED, True, flight.attempt, error=(None, message)
                )
                return

    async def _send(
        self, lane: Lane, request: CompletionRequest
    ) -> tuple[CompletionResponse | None, ProviderError | None]:
        """One call: the answer, or the error (a timeout as one); an adapter bug raises."""
        try:
            response = await asyncio.wait_for(
                lane.provider.complete(request), self.policy.timeout_s + TIMEOUT_GRACE_S
            )
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
        check = None
        if self.reask and item.variant_index in self.checkers:
            response, check = await self._reask(item, lane, prepared, flight, response)
        self.recorder.final(
            item, ItemStatus.SUCCEEDED, True, flight.attempt,
            response=response, endpoint=lane.endpoint, check=check,
        )  # fmt: skip
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
                await asyncio.wait_for(self.stopping.wait(), delay)
        if self.stopping.is_set():
            return False
        acquire = asyncio.ensure_future(lane.limiter.acquire(prepared.tokens))
        stop_wait = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({acquire, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        if not acquire.done():
            acquire.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquire
        if acquire.cancelled() or acquire.exception() is not None:
            return False
        permit = acquire.result()
        if self.stopping.is_set():
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
            if check.status is not CheckStatus.INVALID or self.stopping.is_set():
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

    def _internal_error(self, lane: Lane, exc: Exception) -> None:
        """Count an adapter bug; log its traceback once, stop the run when it repeats."""
        streak = self._internal_streak.get(lane.endpoint.name, 0) + 1
        self._internal_streak[lane.endpoint.name] = streak
        if streak == 1:
            log.error(
                "run %s: the %s adapter raised", self.run_id, lane.endpoint.name, exc_info=exc
            )
        if streak >= INTERNAL_STOP_AFTER and self.stop_reason is None:
            self.stop(
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
