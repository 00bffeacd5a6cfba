"""Context shards in a run: a replayed turn whose history would not fit the model's window
is sent with its own shard of that history (promptlab/conversations/shards.py), and, when the
spec names a summary prompt, with a summary of the shards before it.

The budget is the model's context window (the providers file's `context_windows`) less
`max_tokens` and the version's own messages with the turn. A turn whose history fits
whole is sent as it is and has no shard. A message too large for any shard fails its
turn, not sent, naming the shard (`ShardTooLarge`).

Summaries roll forward: the summary carried into shard k is the summary prompt rendered
with `{{ summary }}` (the one carried into shard k-1, empty for the first) and
`{{ conversation }}` (the messages from shard k-1's start to shard k's, as `role: text`
lines: what shard k's context leaves out), sent through the turn's
own lane and limiter, to the turn's model, once per shard however many turns need it.
Each call is an audit event (`shard.summary`, its trace id the shard's id); its text,
tokens and cost are stored with the shard. A shard is stored once (store/shards.py) and
lives for the spec's TTL; a resumed run reads a live shard's summary back instead of
asking again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from promptlab.audit.chain import AuditDraft, Masker, run_chain
from promptlab.audit.redact import Redactor
from promptlab.clock import Clock
from promptlab.conversations.replay import CONVERSATION_KEY, History, with_conversation
from promptlab.conversations.shards import SUMMARY_INTRO, Shard, ShardCutter, ShardSpec
from promptlab.engine import trace
from promptlab.engine.lanes import Lane
from promptlab.engine.retry import THROTTLE_KINDS, Action, RetryPolicy, classify
from promptlab.engine.writer import BatchWriter
from promptlab.errors import ErrorKind, PromptlabError, ProviderError
from promptlab.prompts.templates import Template
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.providers.config import cost_usd
from promptlab.providers.tokens import (
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    context_window,
    count_tokens,
    estimate_prompt_tokens,
)
from promptlab.records import PendingItem, VariantRecord
from promptlab.records.sessions import SESSION_KEY, ShardRecord
from promptlab.store.shards import ShardStore

log = logging.getLogger(__name__)

#: The summary prompt's output when its template sets no max_tokens.
SUMMARY_MAX_TOKENS = 256
SUMMARY_KIND = "shard.summary"
#: What a summary prompt is rendered with.
SUMMARY_VARIABLES = frozenset({"summary", "conversation"})


@dataclass(frozen=True)
class Replay:
    """What a replay of a conversation log runs with: its history mode (`logged` or
    `generated`), its shards' settings and its summary prompt, resolved."""

    history: str
    shards: ShardSpec
    summary: SummaryPrompt | None


@dataclass(frozen=True)
class SummaryPrompt:
    """The versioned prompt that summarizes earlier shards, resolved when the run is
    submitted (and pinned to its version id in the spec stored with the run)."""

    version_id: str
    ref: str
    template: Template

    @property
    def max_tokens(self) -> int:
        return int(self.template.params.get("max_tokens") or SUMMARY_MAX_TOKENS)


class SummaryFailed(Exception):
    """The summary a turn's shard carries could not be made; `stops_run` when no call
    could (a quota or auth refusal): the run stops, and its turns stay pending."""

    def __init__(self, message: str, stops_run: bool = False) -> None:
        super().__init__(message)
        self.stops_run = stops_run


@dataclass(frozen=True)
class ShardedTurn:
    """A turn's history cut to fit: the shards of its history and the turn (its own is
    the last, and ends with the turn: message len(conversation)), made one at a time
    from the session's cutter (a long session has thousands)."""

    cutter: ShardCutter
    conversation: Sequence[dict[str, str]]

    @property
    def end(self) -> int:
        """The history's messages with the turn."""
        return len(self.conversation) + 1

    @property
    def own(self) -> Shard:
        return self.shard(self.cutter.count(self.end) - 1)

    def shard(self, k: int) -> Shard:
        return self.cutter.shard(k, self.end)


#: A session's cutters by (budget, later budget): kept with its history (engine/histories.py).
Cutters = dict[tuple[int, int | None], ShardCutter]


def message_tokens(message: Mapping[str, str]) -> int:
    """One message's share of a prompt's tokens (the text sent: role and content)."""
    sent = {"role": message["role"], "content": message["content"]}
    return estimate_prompt_tokens([sent]) - REPLY_PRIMING_TOKENS


def transcript(messages: Sequence[Mapping[str, str]]) -> str:
    """A shard's messages as `role: text` lines, for the summary prompt."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


class Sharding:
    """One run's shards: fitting turns into windows, storing shards, making summaries."""

    def __init__(
        self,
        run_id: str,
        spec: ShardSpec,
        summary: SummaryPrompt | None,
        store: ShardStore,
        writer: BatchWriter,
        policy: RetryPolicy,
        clock: Clock,
        *,
        audit: bool,
        masker: Masker | None = None,
        redact: Redactor | None = None,
    ) -> None:
        self.run_id = run_id
        #: A summary is stored, carried and sent masked (and its secrets redacted), as
        #: outputs are.
        self.masker = masker
        self.redact = redact or Redactor.from_environ()
        self.spec = spec
        self.summary = summary
        self.store = store
        self.writer = writer
        self.policy = policy
        self.clock = clock
        self.audit = audit
        #: Shards stored (or being stored) by this process, with the extent (end) stored.
        self._stored: dict[str, int] = {}
        #: Shard rows not written yet, by id (the latest extent and any summary): one
        #: writer at a time writes all there are, so a session's last shard, which grows
        #: with every turn, is not written once per turn.
        self._unwritten: dict[str, ShardRecord] = {}
        self._writer: asyncio.Task[None] | None = None
        self._summaries: dict[str, asyncio.Future[str]] = {}
        # Room a carried summary takes in a later shard: its output, framing and overhead.
        self.summary_room = (
            summary.max_tokens + count_tokens(SUMMARY_INTRO) + TOKENS_PER_MESSAGE + 2
            if summary is not None
            else 0
        )

    def shard_id(self, item: PendingItem, seq_no: int) -> str:
        """A shard's id: the same for every turn of its session, variant and repeat."""
        session = item.values.get(SESSION_KEY)
        text = f"{self.run_id}/{session}/{item.variant_index}/{item.repeat}/{seq_no}"
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def plan(
        self,
        lane: Lane,
        model: str,
        rendered: list[dict[str, str]],
        conversation: Sequence[dict[str, str]],
        max_tokens: int,
        turn: Mapping[str, str] | None,
        cutters: Cutters | None = None,
    ) -> ShardedTurn | None:
        """The turn's shards, or None when its history fits whole (or no window is known,
        or the version's other messages alone leave no room: the preflight says so).

        The shards cut the history and the `turn` (its message as the log has it) in
        the budget the version's messages leave around the turn: the same for every
        turn of a session, so all its turns compute the same shards before their own.
        Raises ShardTooLarge when the turn cannot fit any shard.

        With `cutters` (a logged history: `conversation` a view of its session's list,
        the turn next in it) the session's cutter goes on from where it was, and once a
        turn did not fit whole no longer one is measured whole again: each turn costs
        its own shard, not its session's length."""
        window = context_window(lane.endpoint, model)
        if window is None or not conversation or turn is None:
            return None
        around = estimate_prompt_tokens(rendered) - message_tokens(turn)
        budget = window - max_tokens - around
        later = budget - self.summary_room if self.summary is not None else None
        cutter = cutters.get((budget, later)) if cutters is not None else None
        if cutter is None:
            cutter = ShardCutter(budget, message_tokens, later)
            if cutters is not None:
                cutters[budget, later] = cutter
        end = len(conversation) + 1
        if cutter.overflowed_at is None or end < cutter.overflowed_at:
            whole = with_conversation(rendered, {CONVERSATION_KEY: conversation})
            if estimate_prompt_tokens(whole) + max_tokens <= window:
                return None
            cutter.overflowed_at = min(end, cutter.overflowed_at or end)
        if budget <= 0:
            return None
        if isinstance(conversation, History) and cutters is not None:
            cutter.extend(conversation.messages, end)
        else:
            cutter = ShardCutter(budget, message_tokens, later)
            cutter.extend([*conversation, turn], end)
        cutter.count(end)  # ShardTooLarge now, before anything is stored
        return ShardedTurn(cutter, conversation)

    def note(self, item: PendingItem, variant: VariantRecord, turn: ShardedTurn) -> str:
        """Store the turn's shards as far as it sees them (each extent once; a session's
        last shard grows with its turns until it is cut); its own shard's id."""
        own = turn.own
        # From its own shard back: a shard before it stored to its end was cut when it
        # was stored, and so were those before it (each call stores them all).
        for k in range(own.seq_no, -1, -1):
            shard = turn.shard(k)
            shard_id = self.shard_id(item, k)
            if self._stored.get(shard_id, -1) >= shard.end:
                if k < own.seq_no:
                    break
                continue
            self._store(self._record(item, variant, shard, shard_id, None, None, None))
        return self.shard_id(item, own.seq_no)

    async def summary_for(
        self, item: PendingItem, lane: Lane, variant: VariantRecord, turn: ShardedTurn
    ) -> str | None:
        """The summary the turn's own shard carries (None for the first shard, or with no
        summary prompt). Raises SummaryFailed."""
        if self.summary is None or turn.own.seq_no == 0:
            return None
        return await self._summary(item, lane, variant, turn, turn.own.seq_no)

    def cancel(self) -> None:
        """The run stops: summaries being made are dropped (a resume makes them)."""
        for shard_id, future in list(self._summaries.items()):
            if not future.done():
                future.cancel()
                del self._summaries[shard_id]

    async def flush(self) -> None:
        """Wait for the summaries being made and the shards being stored."""
        pending = [f for f in self._summaries.values() if not f.done()]
        await asyncio.gather(*pending, return_exceptions=True)
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)

    async def prune(self) -> int:
        return await asyncio.to_thread(self.store.prune, self.clock.now())

    # ---- summaries -----------------------------------------------------------------

    async def _summary(
        self, item: PendingItem, lane: Lane, variant: VariantRecord, turn: ShardedTurn, k: int
    ) -> str:
        shard_id = self.shard_id(item, k)
        future = self._summaries.get(shard_id)
        if future is None:
            future = asyncio.ensure_future(self._make(item, lane, variant, turn, k, shard_id))
            # Its failure is each waiting turn's to report, or no one's (the run stopped).
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._summaries[shard_id] = future
        return await asyncio.shield(future)

    async def _make(
        self,
        item: PendingItem,
        lane: Lane,
        variant: VariantRecord,
        turn: ShardedTurn,
        k: int,
        shard_id: str,
    ) -> str:
        assert self.summary is not None
        stored = await asyncio.to_thread(self.store.get, shard_id, self.clock.now())
        if stored is not None and stored.summary is not None:
            return stored.summary
        previous = await self._summary(item, lane, variant, turn, k - 1) if k > 1 else ""
        # What shard k's context leaves out since shard k-1's start: the part to carry.
        left = turn.conversation[turn.shard(k - 1).start : turn.shard(k).start]
        values = {"summary": previous, "conversation": transcript(left)}
        try:
            messages = self.summary.template.render(values)
        except PromptlabError as exc:  # the turns fail for want of it, as `no_summary`
            said = f"the summary prompt {self.summary.ref} did not render: {exc}"
            raise SummaryFailed(said) from exc
        response = await self._send(lane, variant.model, messages, shard_id)
        text = self.redact(response.text)
        if self.masker is not None:
            text = self.masker.mask(text, {})
        response = replace(response, text=text)
        cost = cost_usd(lane.endpoint, variant.model, response.input_tokens, response.output_tokens)
        record = self._record(
            item,
            variant,
            turn.shard(k),
            shard_id,
            response.text,
            response.input_tokens + response.output_tokens,
            cost,
        )
        self._store(record)
        if self.audit:
            payload = {
                "shard_id": shard_id,
                "session": item.values.get(SESSION_KEY),
                "variant": variant.name,
                "repeat": item.repeat,
                "seq_no": k,
                "summarizes": list(range(k)),
                "summary_version_id": self.summary.version_id,
                "prompt_hash": trace.prompt_hash(messages),
                "model": variant.model,
                "model_version": response.model_version,
                "input_tokens": response.input_tokens,
                "output_tokens": response.output_tokens,
                "latency_ms": response.latency_ms,
                "cost_usd": cost,
                "summary": response.text,
            }
            self.writer.audit(
                AuditDraft(
                    run_chain(self.run_id),
                    SUMMARY_KIND,
                    f"{shard_id}/summary",
                    self.clock.now(),
                    payload,
                    run_id=self.run_id,
                    trace_id=shard_id,
                )
            )
        return response.text

    async def _send(
        self, lane: Lane, model: str, messages: list[dict[str, str]], shard_id: str
    ) -> CompletionResponse:
        """One summary call through the lane's limiter, retried like an item's: throttles
        wait at the shared gate, other retryable errors back off; a quota or auth
        refusal stops the run (SummaryFailed.stops_run)."""
        assert self.summary is not None
        request = CompletionRequest(
            model=model,
            messages=tuple(messages),
            max_tokens=self.summary.max_tokens,
            request_id=f"{shard_id}-summary",
            timeout_s=self.policy.timeout_s,
        )
        tokens = estimate_prompt_tokens(messages) + request.max_tokens
        last: ProviderError | None = None
        attempt = throttled = 0
        while attempt - throttled < self.policy.max_attempts:
            attempt += 1
            permit = await lane.limiter.acquire(tokens)
            used: int | None = None
            try:
                response = await asyncio.wait_for(
                    lane.provider.complete(replace(request, attempt=attempt)),
                    self.policy.timeout_s + 1,
                )
                used = response.input_tokens + response.output_tokens
                return response
            except ProviderError as exc:
                last = exc
            except TimeoutError:
                last = ProviderError(
                    ErrorKind.TIMEOUT, f"no answer within {self.policy.timeout_s:g} s"
                )
            finally:
                lane.limiter.release(permit, used)
            lane.limiter.observe_headers(last.headers)
            action = classify(last)
            if action is Action.STOP_RUN:
                raise SummaryFailed(f"{last.kind.value}: {last.provider_message}", stops_run=True)
            if action is Action.FAIL:
                break
            if last.kind in THROTTLE_KINDS:
                throttled += 1
                lane.limiter.on_throttle(last.retry_after_s, permit.epoch)
                if throttled >= self.policy.max_throttled_attempts:
                    break
                continue
            await asyncio.sleep(self.policy.delay_s(last, attempt - throttled))
        raise SummaryFailed(str(last) if last is not None else "no answer in time")

    # ---- storing -------------------------------------------------------------------

    def _record(
        self,
        item: PendingItem,
        variant: VariantRecord,
        shard: Shard,
        shard_id: str,
        summary: str | None,
        summary_tokens: int | None,
        summary_cost: float | None,
    ) -> ShardRecord:
        now = self.clock.now()
        return ShardRecord(
            shard_id,
            self.run_id,
            str(item.values.get(SESSION_KEY)),
            variant.name,
            item.repeat,
            shard.seq_no,
            False,
            shard.start,
            shard.end - 1,
            shard.tokens,
            shard.cut,
            summary,
            self.summary.version_id if summary and self.summary else None,
            summary_tokens,
            summary_cost,
            now,
            now + timedelta(seconds=self.spec.ttl_s),
        )

    def _store(self, record: ShardRecord) -> None:
        end = record.last_message + 1
        self._stored[record.shard_id] = max(end, self._stored.get(record.shard_id, -1))
        earlier = self._unwritten.get(record.shard_id)
        if earlier is not None:
            record = _merged(earlier, record)
        self._unwritten[record.shard_id] = record
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        while self._unwritten:
            records, self._unwritten = list(self._unwritten.values()), {}
            try:
                await asyncio.to_thread(self.store.add_many, records)
            except Exception:  # noqa: BLE001 - a shard row is for the views; the run goes on
                log.warning("context shards not stored", exc_info=True)


def _merged(earlier: ShardRecord, later: ShardRecord) -> ShardRecord:
    """Two writes of one shard as one: the further extent, and the summary either has."""
    grown = later if later.last_message >= earlier.last_message else earlier
    summed = later if later.summary is not None else earlier
    return replace(
        grown,
        summary=summed.summary,
        summary_version_id=summed.summary_version_id,
        summary_tokens=summed.summary_tokens,
        summary_cost_usd=summed.summary_cost_usd,
    )
