"""A replay's logged histories, put together as its turns are sent.

A replayed turn's row holds only its part of its session's history: the messages logged
since the session's previous user message, and its own (conversations/replay.py). So a
plan stores each message once, whatever the length of its session, and the history a
turn is sent with is built when it is sent: its session's messages so far, one list per
session that grows as its turns come (in plan order), each turn a view of its first
messages (`History`), never a copy. A turn whose session's earlier turns this process
has not seen (a resumed run, a session dropped to make room) reads their rows from the
run's plan once. A session's list also keeps its context-shard cutters
(engine/send/sharding.py), so cutting a long session costs its length, not its square.

Sessions no turn has asked for lately are dropped when the lists hold more than
MAX_HELD_MESSAGES messages in all (the one in use is kept, however long).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from promptlab.conversations.replay import BEFORE_KEY, TURN_KEY, History, is_turn_row, turn_of
from promptlab.engine.send.sharding import Cutters
from promptlab.records import PendingItem

#: Messages the sessions' lists hold in all before the least recently used are dropped.
MAX_HELD_MESSAGES = 100_000

#: (first row, last row) -> the run's rows between them (both included), in order.
RowLoader = Callable[[int, int], Awaitable[Sequence[Mapping[str, Any]]]]


@dataclass
class _Session:
    messages: list[dict[str, str]] = field(default_factory=list)
    #: Per turn seen, in order: the messages of the history before it.
    ends: list[int] = field(default_factory=list)
    cutters: Cutters = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def add(self, values: Mapping[str, Any]) -> None:
        """The next turn's row: its part of the history, then the turn itself."""
        self.messages.extend(values.get(BEFORE_KEY) or ())
        self.ends.append(len(self.messages))
        self.messages.append(values[TURN_KEY])


@dataclass(frozen=True)
class Logged:
    """A turn's logged history (a view of its session's list) and its session's cutters."""

    history: History
    cutters: Cutters


class SessionHistories:
    """The logged histories of one run's replayed sessions."""

    def __init__(self, load: RowLoader, max_messages: int = MAX_HELD_MESSAGES) -> None:
        self._load = load
        self.max_messages = max_messages
        #: By the row of the session's first turn, least recently asked first.
        self._sessions: OrderedDict[int, _Session] = OrderedDict()
        self._held = 0
        #: Rows read back from the plan (a resumed session's earlier turns).
        self.rows_loaded = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def held(self) -> int:
        """Messages the sessions' lists hold in all."""
        return self._held

    async def history(self, item: PendingItem) -> Logged | None:
        """The history before `item`'s turn as logged; None for a row that is not a
        replayed turn stored in parts (any other run's, or a replay planned with every
        turn's history in its row)."""
        values = item.values
        if not is_turn_row(values):
            return None
        turn = turn_of(values)
        first = item.row_index - turn
        session = self._sessions.get(first)
        if session is None:
            session = self._sessions[first] = _Session()
        self._sessions.move_to_end(first)
        if turn >= len(session.ends):
            async with session.lock:  # one reader of the plan per session at a time
                held, seen = len(session.messages), len(session.ends)
                if turn > seen:
                    rows = await self._load(first + seen, item.row_index - 1)
                    self.rows_loaded += len(rows)
                    for row in rows:
                        session.add(row)
                if turn == len(session.ends):
                    session.add(values)
                if self._sessions.get(first) is session:  # not dropped while it read
                    self._held += len(session.messages) - held
        self._drop(keep=first)
        return Logged(History(session.messages, session.ends[turn]), session.cutters)

    def _drop(self, keep: int) -> None:
        while self._held > self.max_messages and len(self._sessions) > 1:
            first, session = next(iter(self._sessions.items()))
            if first == keep:
                self._sessions.move_to_end(first)
                continue
            del self._sessions[first]
            self._held -= len(session.messages)
