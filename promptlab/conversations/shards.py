"""Context shards: a session's history cut where the model's context window needs it.

A replayed turn is sent with the conversation before it (conversations/replay.py). When
that would not fit the model's window less the reserved output and the version's own
messages (the budget), the history is cut into shards. Going through the session's
turns in order, a turn that no longer fits with its shard so far starts a new shard.
Its context starts at a boundary from which the turn fits, of the first kind there is
in this order of preference:

1. `intent` (the last one: where the turn's topic began): a user message that changes
   topic. The heuristic is cheap and documented:
   the message opens with a cue (INTENT_CUES, in its first 80 characters: "another
   question", "by the way", ...), or it has at least six content words (three letters
   or more, STOP_WORDS left out) and shares none with the messages of its shard so far;
2. `gap` (the last one): more than five minutes between a message and the one before
   it (a log ordered by timestamps; a log ordered by turn numbers has no gaps);
3. `type` (the first one that leaves half the room free, so the next turns fit too):
   a user message after a message of another role (a new exchange starts);
4. `window`: no boundary of those kinds fits, so the first user message from which the
   turn fits in half the room.

A shard's context always starts at a user message: providers want a conversation to
open with one.

Later shards get `later_budget` (the budget less a carried summary's room). A shard's
start depends only on the messages up to the turn that opened it, so every turn of a
session computes the same shards before its own: they are stored once and replayed
consistently, and a turn's shard never moves once the turn was sent. A turn is sent with
its own shard: the messages from that shard's start to the turn. A shard's context may
start before its first turn (at the boundary chosen): the messages between are shared
with the shard before, and a summary carried into it covers what comes before its
start.

Pure: no store, no engine. A message too large for any shard raises ShardTooLarge.
A spec's `shards:` (`ShardSpec`) says how long stored shards live and which versioned
prompt summarizes the shards before a turn's own (engine/send/sharding.py sends it).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

#: Boundary kinds, most preferred first; `window` is the cut at the budget itself.
BOUNDARIES = ("intent", "gap", "type")
WINDOW = "window"
GAP = timedelta(minutes=5)
INTENT_CUES = (
    "another question",
    "also,",
    "by the way",
    "one more thing",
    "unrelated",
    "different question",
    "different topic",
    "new issue",
    "separate issue",
    "something else",
    "on another note",
    "changing topic",
    "switching topic",
)
#: How far into a user message a cue counts (a cue later on is not an opening).
CUE_CHARS = 80
MIN_TOPIC_WORDS = 6
_STOP_WORDS = """the and for you your are was were this that with have has had not but
can could would should will what when where which who how why there their them they then
than from into about just also been being any all its it's i'm i've don't does did our out
get got one two too very now here please thanks thank yes"""
STOP_WORDS = frozenset(_STOP_WORDS.split())
_WORD = re.compile(r"[a-z][a-z']{2,}")

Message = Mapping[str, str]
#: How long stored shards live unless a spec's `shards: {ttl: ...}` says otherwise.
DEFAULT_TTL_S = 7 * 24 * 3600
_TTL = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SHARD_FIELDS = frozenset({"summary", "ttl"})


@dataclass(frozen=True)
class ShardSpec:
    """A replay's `shards:`: the summary prompt (a reference, pinned to its version's id
    when the run is submitted) and how long its stored shards live."""

    summary: str | None = None
    ttl_s: int = DEFAULT_TTL_S


def parse_shards(value: Any) -> ShardSpec:
    """`shards: {summary: PROMPT_REF, ttl: 7d}`, checked (ValueError naming the field)."""
    if value is None:
        return ShardSpec()
    if not isinstance(value, Mapping) or set(value) - SHARD_FIELDS:
        raise ValueError(f"shards: allowed keys are {', '.join(sorted(SHARD_FIELDS))}")
    summary = value.get("summary")
    if summary is not None and (not isinstance(summary, str) or "@" not in summary):
        raise ValueError(
            f"shards.summary: a prompt version like support-summary@production, got {summary!r}"
        )
    ttl = value.get("ttl", DEFAULT_TTL_S)
    matched = _TTL.match(ttl) if isinstance(ttl, str) else None
    if matched:
        ttl = int(matched[1]) * _TTL_UNITS[matched[2]]
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 60:
        raise ValueError(
            f"shards.ttl: a duration of at least a minute (30m, 12h, 7d, or seconds), got "
            f"{value.get('ttl')!r}"
        )
    return ShardSpec(summary, ttl)


@dataclass(frozen=True)
class Shard:
    """Messages [start, end) of a session's history (their indexes in it): from where
    its context starts to the last message before the next shard's first turn. A shard
    that starts at a boundary before that turn shares the messages between with the
    shard before it."""

    seq_no: int
    start: int
    end: int
    tokens: int
    #: Why the shard before it ended here (a BOUNDARIES kind or WINDOW); "start" for
    #: the session's first shard.
    cut: str


class ShardTooLarge(ValueError):
    """A turn's message is over the budget alone: no shard can hold it."""

    def __init__(self, seq_no: int, index: int, tokens: int, budget: int) -> None:
        self.seq_no, self.index, self.tokens, self.budget = seq_no, index, tokens, budget
        super().__init__(
            f"shard {seq_no + 1} cannot hold message {index + 1} of the session (the turn), "
            f"~{tokens:,} tokens alone, over the ~{budget:,} the window leaves"
        )


#: How a carried summary opens, sent as a user message before its shard's messages.
SUMMARY_INTRO = "Summary of the conversation before this part:"


def sharded(
    history: Sequence[Message], start: int, end: int | None, summary: str | None = None
) -> list[dict[str, str]]:
    """A turn's conversation cut to its shard (messages [start, end) of its history; a
    turn's own shard runs to its history's end), after the summary of the shards before
    when there is one."""
    part = [dict(m) for m in history[start:end]]
    if summary:
        part.insert(0, {"role": "user", "content": f"{SUMMARY_INTRO}\n{summary}"})
    return part


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def is_intent_switch(text: str, earlier_texts: Sequence[str]) -> bool:
    """Whether a user message changes topic from the messages before it in its shard
    (see the module's docstring for the heuristic)."""
    earlier = set().union(*(content_words(t) for t in earlier_texts))
    return _switches(text, earlier if earlier_texts else None)


def _switches(text: str, earlier_words: set[str] | None) -> bool:
    """`is_intent_switch` with the shard's words so far counted once (None: no message)."""
    opening = text.strip().lower()[:CUE_CHARS]
    if any(cue in opening for cue in INTENT_CUES):
        return True
    words = content_words(text)
    if len(words) < MIN_TOPIC_WORDS or earlier_words is None:
        return False
    return not words & earlier_words


def _time(message: Message) -> datetime | None:
    at = message.get("at")
    if not at:
        return None
    try:
        return datetime.fromisoformat(str(at))
    except ValueError:
        return None  # a turn number: a log ordered by turns has no gaps


def boundary_kinds(history: Sequence[Message], start: int, index: int) -> set[str]:
    """The kinds of boundary before message `index` of a shard that starts at `start`."""
    earlier = set().union(*(content_words(m["content"]) for m in history[start:index]))
    return _kinds(history, index, earlier if index > start else None)


def _kinds(history: Sequence[Message], index: int, earlier_words: set[str] | None) -> set[str]:
    message, before = history[index], history[index - 1]
    kinds = set()
    if message["role"] == "user":
        if before["role"] != "user":
            kinds.add("type")
        if _switches(message["content"], earlier_words):
            kinds.add("intent")
    now, then = _time(message), _time(before)
    if now is not None and then is not None:
        try:
            if now - then > GAP:
                kinds.add("gap")
        except TypeError:  # one with an offset, one without: not comparable
            pass
    return kinds


def shard_history(
    messages: Sequence[Message],
    budget: int,
    tokens_of: Callable[[Message], int],
    later_budget: int | None = None,
) -> list[Shard]:
    """A turn's history and the turn itself (`messages`, the turn last) cut into shards
    (see the module's docstring); the turn's own shard is the last."""
    cutter = ShardCutter(budget, tokens_of, later_budget)
    cutter.extend(messages, len(messages))
    return cutter.shards(len(messages))


class ShardCutter:
    """`shard_history` kept up as a session's history grows: each message is looked at
    once, so cutting every turn of a session costs the session's length, not its square.

    A shard's start depends only on the messages up to the turn that opened it, so the
    shards of any prefix of the history are those opened within it, the last one ending
    with the prefix (`shards`)."""

    def __init__(
        self,
        budget: int,
        tokens_of: Callable[[Message], int],
        later_budget: int | None = None,
    ) -> None:
        self.budget = budget
        self.later = later_budget if later_budget is not None else budget
        self.tokens_of = tokens_of
        #: Token sums of the messages looked at: sums[i] is that of messages [0, i).
        self.sums = [0]
        # Each shard: where its context starts, its first turn, why the one before ended.
        self.starts, self.first_turns, self.cuts = [0], [0], ["start"]
        #: The message no shard can hold, once one was met (every longer prefix fails).
        self.failed: ShardTooLarge | None = None
        #: Whether a turn of this session's history did not fit whole: a longer history
        #: does not either (engine/send/sharding.py skips the check from then on).
        self.overflowed_at: int | None = None

    @property
    def seen(self) -> int:
        return len(self.sums) - 1

    def tokens(self, first: int, last: int) -> int:
        return self.sums[last + 1] - self.sums[first]

    def extend(self, messages: Sequence[Message], upto: int) -> None:
        """Look at messages [seen, upto) of the history (`messages` is the whole of it,
        or any longer prefix)."""
        while self.seen < upto and self.failed is None:
            index = self.seen
            message = messages[index]
            self.sums.append(self.sums[-1] + self.tokens_of(message))
            if message["role"] != "user":
                continue
            room = self.budget if len(self.starts) == 1 else self.later
            if self.tokens(self.starts[-1], index) <= room:
                continue
            start, cut = _next_start(messages, self.starts[-1], index, self.later, self.tokens)
            if start is None:
                self.failed = ShardTooLarge(
                    len(self.starts), index, self.tokens(index, index), self.later
                )
                break
            self.starts.append(start)
            self.first_turns.append(index)
            self.cuts.append(cut)

    def shards(self, end: int) -> list[Shard]:
        """The shards of the history's first `end` messages (all looked at already);
        raises ShardTooLarge when one of them cannot be held."""
        count = self.count(end)
        ends = [*self.first_turns[1:count], end]
        return [
            Shard(k, self.starts[k], stop, self.tokens(self.starts[k], stop - 1), self.cuts[k])
            for k, stop in enumerate(ends)
        ]

    def count(self, end: int) -> int:
        """How many shards the history's first `end` messages make (ShardTooLarge when
        one of them cannot be held)."""
        if self.failed is not None and self.failed.index < end:
            raise self.failed
        return bisect.bisect_left(self.first_turns, end) or 1

    def shard(self, k: int, end: int) -> Shard:
        """Shard `k` of the history's first `end` messages, made without the others."""
        stop = self.first_turns[k + 1] if k + 1 < self.count(end) else end
        start = self.starts[k]
        return Shard(k, start, stop, self.tokens(start, stop - 1), self.cuts[k])


def _next_start(
    messages: Sequence[Message],
    start: int,
    turn: int,
    room: int,
    tokens: Callable[[int, int], int],
) -> tuple[int | None, str]:
    """Where the next shard's context starts once the one from `start` cannot hold
    `turn` (see the module's docstring): always at a user message, as providers want a
    conversation to open with one; None when the turn alone does not fit."""
    kinds: dict[int, set[str]] = {}
    words = content_words(messages[start]["content"])  # the shard's words so far
    for b in range(start + 1, turn + 1):
        if messages[b]["role"] == "user" and tokens(b, turn) <= room:
            kinds[b] = _kinds(messages, b, words)
        words |= content_words(messages[b]["content"])
    fitting = list(kinds)
    if not fitting:
        return None, WINDOW
    for kind in ("intent", "gap"):  # where the topic (or the visit) the turn is in began
        found = [b for b in fitting if kind in kinds[b]]
        if found:
            return found[-1], kind
    # Half the room at most, so the turns after this one fit too.
    half = [b for b in fitting if tokens(b, turn) <= room // 2] or fitting[-1:]
    typed = [b for b in half if "type" in kinds[b]]
    return (typed[0], "type") if typed else (half[0], WINDOW)
