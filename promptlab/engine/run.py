"""One run's execution on the engine loop: stream items, dispatch, hold replayed turns.

Each dispatched item runs as one guarded unit (`ItemAttempts.run_item`,
engine/send/attempts.py): whatever is raised on its way, its permit goes back to the shared
limiter and it gets exactly one final row. What items leave behind is recorded by
engine/record/recorder.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from promptlab.audit.chain import Masker
from promptlab.audit.redact import Redactor
from promptlab.checks.plugged import CheckUse
from promptlab.checks.validation import Checker, checker_for
from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.conversations.replay import turn_of
from promptlab.engine.record.progress import Counters
from promptlab.engine.record.recorder import ItemRecorder
from promptlab.engine.record.writer import BatchWriter
from promptlab.engine.send.attempts import (
    CANCELLED_IN_FLIGHT,
    INTERNAL_STOP_AFTER,
    REASK_ERRORS_LISTED,
    TIMEOUT_GRACE_S,
    WAIT_BACKOFF,
    Flight,
    ItemAttempts,
    reask_message,
)
from promptlab.engine.send.cache import RunCache
from promptlab.engine.send.chains import Blocked, SessionChains, Stopped
from promptlab.engine.send.histories import SessionHistories
from promptlab.engine.send.lanes import Lane, is_batched
from promptlab.engine.send.limiter import Permit
from promptlab.engine.send.requests import Prepared, RequestBuilder
from promptlab.engine.send.retry import RetryPolicy
from promptlab.engine.send.sharding import Replay, Sharding
from promptlab.engine.send.summaries import SummaryFailed
from promptlab.engine.spec.fields import CacheSpec
from promptlab.engine.spec.runspec import AS_WRITTEN
from promptlab.prompts.templates import Template
from promptlab.providers.batches.provider import BatchProvider
from promptlab.records import AlertRecord, ItemErrorKind, ItemStatus, PendingItem, VariantRecord
from promptlab.store.items import ItemStore
from promptlab.store.response_cache import ResponseCacheStore
from promptlab.store.sessions import SessionReads
from promptlab.store.shards import ShardStore

#: Importable from here, as before one item's attempts had a module of their own.
__all__ = [
    "CANCELLED_IN_FLIGHT",
    "CHUNK_SIZE",
    "INTERNAL_STOP_AFTER",
    "MAX_WAITING_TURNS",
    "REASK_ERRORS_LISTED",
    "TIMEOUT_GRACE_S",
    "WAIT_BACKOFF",
    "Flight",
    "RunExecution",
    "reask_message",
]

log = logging.getLogger(__name__)

#: Items read from the store per query; two chunks per endpoint are in memory at most.
CHUNK_SIZE = 1_000
#: Replayed turns read but waiting for their session's previous turn (history:
#: generated); the feeder reads on only while fewer wait.
MAX_WAITING_TURNS = 2 * CHUNK_SIZE


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
        cache: CacheSpec | None = None,
        output_checks: Sequence[CheckUse] = (),
    ) -> None:
        self.run_id = run_id
        self.clock = clock
        self.variants = {v.index: v for v in variants}
        self.templates, self.checkers = compiled_checks(variants)
        self.lanes = list(lanes)
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
        self.recorder = self._item_recorder(
            counters, alert_sink, reask, audit, masker, output_checks
        )
        self.cache = self._run_cache(cache)
        #: Each dispatched item's sends, retries and re-asks (engine/send/attempts.py).
        self.attempts = ItemAttempts(self, self.recorder, self.checkers, policy, clock, reask=reask)
        self.sharding, self.histories = self._replay_parts(replay, audit, masker)
        positions = (rows if rows is not None else counters.total) * repeats
        self.requests = self._request_builder(repeats, top_logprobs, positions)

    def _item_recorder(
        self,
        counters: Counters,
        alert_sink: Callable[[list[AlertRecord]], None] | None,
        reask: int,
        audit: bool,
        masker: Masker | None,
        output_checks: Sequence[CheckUse],
    ) -> ItemRecorder:
        """What the run's items leave behind (engine/record/recorder.py); with generated history
        each final row lets its session's next turn go."""
        return ItemRecorder(
            self.run_id,
            self.variants,
            self.templates,
            self.checkers,
            self.writer,
            counters,
            self.clock,
            alert_sink=alert_sink,
            reask=reask,
            audit=audit,
            masker=masker,
            on_final=self._finished if self.chains is not None else None,
            output_checks=output_checks,
        )

    def _request_builder(
        self, repeats: int, top_logprobs: int | None, positions: int
    ) -> RequestBuilder:
        """How an item becomes the request it sends (engine/send/requests.py), a replayed
        turn's with its history and context shard."""
        return RequestBuilder(
            self.variants,
            self.templates,
            self.recorder,
            self.policy.timeout_s,
            self.sharding,
            self.histories,
            repeats=repeats,
            top_logprobs=top_logprobs,
            positions=positions,
        )

    def _run_cache(self, cache: CacheSpec | None) -> RunCache | None:
        """The response cache, when the spec uses it (engine/send/cache.py)."""
        if cache is None or cache.mode == "off":
            return None
        store = ResponseCacheStore(self.items.store)
        checks = (self.templates, self.checkers)
        return RunCache(self.run_id, cache, store, self.writer, self.clock, checks)

    def _replay_parts(
        self, replay: Replay | None, audit: bool, masker: Masker | None
    ) -> tuple[Sharding | None, SessionHistories | None]:
        """A replay's context shards (its turns' histories cut to fit the window) and its
        logged histories, built as its turns are sent (engine/send/histories.py)."""
        if replay is None:
            return None, None
        sharding = Sharding(
            self.run_id,
            replay.shards,
            replay.summary,
            ShardStore(self.items.store),
            self.writer,
            self.policy,
            self.clock,
            audit=audit,
            masker=masker,
            redact=self._redact,
        )
        return sharding, SessionHistories(self._turn_rows)

    # ---- control -------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop new dispatches now; in-flight requests finish or time out. A provider
        batch's lines end now, and its batches are cancelled at the provider."""
        self.cancelled = True
        self._halt()
        for lane in self.lanes:
            if isinstance(lane.provider, BatchProvider):
                lane.provider.cancel_run(self.run_id)

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
        if any(is_batched(lane) for lane in self.lanes):
            # Lines waiting for provider batches would wait hours: they end cancelled now,
            # and a resume waits for the same lines (their batches are not sent again).
            for task in self._items:
                task.cancel()
        if self.sharding is not None:
            self.sharding.cancel()  # summaries no turn waits for any more

    # ---- the run -------------------------------------------------------------------

    async def execute(self) -> None:
        """Feed every lane, wait for the last item, flush; the caller sets the final status."""
        if self.sharding is not None:
            await self.sharding.prune()  # shards past their TTL, of any run
        if self.cache is not None:
            await self.cache.load(self.lanes, self.variants)
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
                    if prepared is None or self._from_cache(item, lane, prepared):
                        continue
                    permit = await lane.limiter.acquire(prepared.tokens)
                    self._dispatch(item, lane, prepared, permit)
        finally:
            next_chunk.cancel()

    def _from_cache(self, item: PendingItem, lane: Lane, prepared: Prepared) -> bool:
        """Answer the item from the response cache when it holds this very request's
        answer and that answer passes the variant's checks now: it takes no permit, is
        not sent and costs 0 (engine/send/cache.py)."""
        variant = self.variants[item.variant_index]
        hit = self.cache.hit(variant, lane.endpoint, prepared.request) if self.cache else None
        if hit is None:
            return False
        response, check = hit
        self.recorder.final(
            item,
            ItemStatus.SUCCEEDED,
            False,
            item.attempts,
            response=response,
            endpoint=lane.endpoint,
            check=check,
            cache_hit=True,
        )
        return True

    def _dispatch(self, item: PendingItem, lane: Lane, prepared: Prepared, permit: Permit) -> None:
        task = asyncio.create_task(self.attempts.run_item(item, lane, prepared, permit))
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
            if prepared is None or self._from_cache(item, lane, prepared):
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
            self.attempts.internal_error(lane, exc)
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


def compiled_checks(
    variants: Sequence[VariantRecord],
) -> tuple[dict[int, Template], dict[int, Checker]]:
    """Each variant's template (requests as written have none), and the compiled output
    checks of those with an output schema or rules (rules need the output parsed: with
    no schema, any JSON fits)."""
    templates = {
        v.index: Template.from_canonical(v.template)
        for v in variants
        if not v.template.get(AS_WRITTEN)
    }
    checkers: dict[int, Checker] = {
        index: checker_for(template.output_schema or {})
        for index, template in templates.items()
        if template.output_schema is not None or template.rules
    }
    return templates, checkers
