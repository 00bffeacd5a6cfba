"""Context shards in a run: a replayed turn whose history would not fit the model's window
is sent with its own shard of that history (promptlab/conversations/shards.py), and, when the
spec names a summary prompt, with a summary of the shards before it (engine/send/summaries.py).

The budget is the model's context window (the providers file's `context_windows`) less
`max_tokens` and the version's own messages with the turn. A turn whose history fits
whole is sent as it is and has no shard. A message too large for any shard fails its
turn, not sent, naming the shard (`ShardTooLarge`).

A summary is made once per shard however many turns need it; its text, tokens and cost
are stored with the shard. A shard is stored once (store/shards.py) and lives for the
spec's TTL; a resumed run reads a live shard's summary back instead of asking again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from promptlab.audit.chain import Masker
from promptlab.audit.redact import Redactor
from promptlab.clock import Clock
from promptlab.conversations.replay import CONVERSATION_KEY, History, with_conversation
from promptlab.conversations.shards import SUMMARY_INTRO, Shard, ShardCutter, ShardSpec
from promptlab.engine.record.writer import BatchWriter
from promptlab.engine.send.lanes import Lane
from promptlab.engine.send.retry import RetryPolicy
from promptlab.engine.send.summaries import (
    MadeSummary,
    SummaryPrompt,
    send_summary,
    summary_event,
    summary_messages,
)
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


@dataclass(frozen=True)
class Replay:
    """What a replay of a conversation log runs with: its history mode (`logged` or
    `generated`), its shards' settings and its summary prompt, resolved."""

    history: str
    shards: ShardSpec
    summary: SummaryPrompt | None


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


#: A session's cutters by (budget, later budget): kept with its history (engine/send/histories.py).
Cutters = dict[tuple[int, int | None], ShardCutter]


def message_tokens(message: Mapping[str, str]) -> int:
    """One message's share of a prompt's tokens (the text sent: role and content)."""
    sent = {"role": message["role"], "content": message["content"]}
    return estimate_prompt_tokens([sent]) - REPLY_PRIMING_TOKENS


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
        messages = summary_messages(self.summary, previous, left)
        response = await send_summary(
            lane, self.policy, variant.model, messages, self.summary.max_tokens, shard_id
        )
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
            made = MadeSummary(shard_id, k, messages, response, cost)
            event = summary_event(self.run_id, self.summary, item, variant, made, self.clock.now())
            self.writer.audit(event)
        return response.text

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
