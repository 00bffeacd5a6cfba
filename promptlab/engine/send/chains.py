"""`history: generated`: a replayed session's turns in order, each sent with the model's
own earlier answers.

A replay's items are a conversation log's user turns (promptlab/conversations/replay.py),
planned in session order, so a session's turns are consecutive rows and, for one variant
and repeat, a turn's predecessor is the row before it. With generated history a turn
needs its predecessors' answers: it waits for them here (sessions still run side by side
under the one limiter), then is sent with the session's user messages as logged, each
followed by the model's answer to it in place of the logged one.

A chain is one session of one variant and repeat. The feeder registers each item it
reads; a turn whose predecessor this process has seen waits for that predecessor's final
row. A turn whose predecessors finished before this process started (a resumed run)
reads their answers from the store, once per chain. An answer is taken as stored (masked
when masking is on), so a resumed session goes on exactly as it would have. A turn after
one that failed is not sent: it fails, naming the turn, and so do the turns after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from promptlab.conversations.replay import turn_of
from promptlab.records import ItemStatus, PendingItem
from promptlab.records.sessions import SESSION_KEY

#: (variant index, repeat, first row, rows) -> {row index: output text of a succeeded
#: turn}: the answers of a resumed chain's turns that finished before this process.
AnswerLoader = Callable[[int, int, int, int], Awaitable[Mapping[int, str]]]

_Key = tuple[str, int, int]


class Stopped(Exception):
    """The run stopped while a turn waited: it stays pending, to be resumed."""


class Blocked(Exception):
    """A turn cannot be sent because an earlier turn of its session has no answer."""


@dataclass
class _Chain:
    #: Turn -> the answer it got (succeeded turns only).
    answers: dict[int, str] = field(default_factory=dict)
    #: Turns registered in this process -> set when the turn has its final row.
    done: dict[int, asyncio.Event] = field(default_factory=dict)
    #: Turns registered in this process that ended without an answer -> their status.
    unanswered: dict[int, str] = field(default_factory=dict)
    open_turns: int = 0
    #: The feeder has moved on to the next session: nothing more will be registered.
    closed: bool = False
    loaded: bool = False


class SessionChains:
    """The chains of one run's generated-history replay."""

    def __init__(self, load: AnswerLoader) -> None:
        self._load = load
        self._chains: dict[_Key, _Chain] = {}
        #: (variant, repeat) -> the session the feeder registers now.
        self._current: dict[tuple[int, int], str] = {}

    def __len__(self) -> int:
        return len(self._chains)

    def register(self, item: PendingItem) -> None:
        """The feeder read `item`: a later turn of its session will wait for it."""
        session = str(item.values[SESSION_KEY])
        lane = item.variant_index, item.repeat
        previous = self._current.get(lane)
        if previous != session:
            self._current[lane] = session
            if previous is not None:
                self._close((previous, *lane))
        chain = self._chains.setdefault((session, *lane), _Chain())
        chain.done[turn_of(item.values)] = asyncio.Event()
        chain.open_turns += 1

    def finished(self, item: PendingItem, status: str, answer: str | None) -> None:
        """`item` has its final row (`answer` is its stored output text)."""
        key = (str(item.values.get(SESSION_KEY)), item.variant_index, item.repeat)
        chain = self._chains.get(key)
        turn = turn_of(item.values)
        if chain is None or turn not in chain.done or chain.done[turn].is_set():
            return
        if status == ItemStatus.SUCCEEDED and answer is not None:
            chain.answers[turn] = answer
        else:
            chain.unanswered[turn] = status
        chain.done[turn].set()
        chain.open_turns -= 1
        if chain.closed and chain.open_turns == 0:
            del self._chains[key]

    async def answers(self, item: PendingItem) -> list[str]:
        """The model's answers to the turns before `item`'s, in order, once its
        predecessor has one. Raises Stopped when the predecessor ended cancelled (the run
        is stopping) and Blocked when an earlier turn has no answer."""
        turn = turn_of(item.values)
        if turn == 0:
            return []
        session = str(item.values[SESSION_KEY])
        chain = self._chains[(session, item.variant_index, item.repeat)]
        before = chain.done.get(turn - 1)
        if before is not None:
            await before.wait()
        elif not chain.loaded:  # its predecessors finished before this process: read them
            chain.loaded = True
            first = item.row_index - turn
            stored = await self._load(item.variant_index, item.repeat, first, turn)
            chain.answers.update({row - first: text for row, text in stored.items()})
        for earlier in range(turn):
            if earlier in chain.answers:
                continue
            if chain.unanswered.get(earlier) == ItemStatus.CANCELLED:
                raise Stopped
            raise Blocked(
                f"turn {earlier + 1} of session {session} has no answer, so turn {turn + 1} "
                "cannot be sent with the model's own history (history: generated)"
            )
        return [chain.answers[t] for t in range(turn)]

    def _close(self, key: _Key) -> None:
        chain = self._chains.get(key)
        if chain is None:
            return
        chain.closed = True
        if chain.open_turns == 0:
            del self._chains[key]
