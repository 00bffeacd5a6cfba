"""Conversation logs: a dataset of messages, one row each, grouped into sessions.

A conversation log names four of its columns: the session id, the order of a session's
messages (a turn number or a timestamp, one kind for the whole log), the role (`system`,
`user` or `assistant`, any case) and the text. It is imported like any dataset, then
refused whole, in one line naming the row, when a role is unknown, a session id is
blank, an order value is neither a number nor a timestamp (or the log mixes the two),
or two messages of one session share an order value: a replay could not know which
came first. The SQL lives in `promptlab.store.datasets`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from promptlab.errors import DatasetError
from promptlab.records import Conversation
from promptlab.records.sessions import SESSION_KEY
from promptlab.store.datasets import DatasetTables, DatasetWrites

ROLES = ("system", "user", "assistant")
#: The key of a replayed turn's row holding the session's messages before it, as
#: logged: sent before the prompt version's last user message (the turn itself). A
#: plan does not store it (BEFORE_KEY); a row is given it to be rendered (`with_history`),
#: and rows planned before that hold it.
CONVERSATION_KEY = "__conversation__"
#: The key of a replayed turn's row holding its own message as the history holds it
#: (role, content, order value): context shards are cut with it (conversations/shards.py).
TURN_KEY = "__turn__"
#: The key of a replayed turn's row holding the messages logged between its session's
#: previous user message and its own (an answer, a greeting): its part of the history.
BEFORE_KEY = "__before__"
#: The key of a replayed turn's row holding its place in its session (0 for the first).
TURN_NO_KEY = "__turn_no__"


def check_conversation(
    writes: DatasetWrites, name: str, conv: Conversation, columns: list[str], where: str
) -> None:
    """Refuse, in one line, rows that do not make a conversation log."""
    for purpose, column in conv.columns().items():
        if column not in columns:
            raise DatasetError(
                f"{where}: the {purpose} column {column!r} is not a column; columns: "
                f"{', '.join(columns)}"
            )
    problem = writes.conversation_problem(name, conv)
    if problem is None:
        return
    what, row, value, other = problem
    messages = {
        "role": f"column {conv.role}: unknown role {value!r} (expected {', '.join(ROLES)})",
        "session": f"column {conv.session}: no session id",
        "order": f"column {conv.order}: {value!r} is neither a turn number nor a timestamp",
        "mixed": f"column {conv.order}: {value!r} is not the kind of order value row "
        f"{other} has; a log orders by turn numbers or by timestamps, not both",
        "twice": f"column {conv.order}: {value!r} again in the same session as row {other}; "
        "a session's messages need distinct order values",
    }
    raise DatasetError(f"{where}, row {row}, {messages[what]}")


def replay_rows(
    tables: DatasetTables,
    name: str,
    conv: Conversation,
    limit: int | None = None,
    with_history: bool = False,
) -> Iterator[dict[str, Any]]:
    """A row per user message (the first `limit`), sessions in order: the message's own
    row with its session (SESSION_KEY), its place in it (TURN_NO_KEY), itself as the
    history holds it (TURN_KEY) and the messages logged since the session's previous user
    message (BEFORE_KEY). What a run stores per turn is bounded by that: the history
    before a turn is its session's earlier rows, put together when the turn is sent
    (`history_of`). With `with_history` (an estimate's sample) each row also carries
    that history (CONVERSATION_KEY), as a view of the one list its session's rows share.
    A logged system message is not sent: the prompt version's messages take its place.
    One session's messages are held at a time."""
    rows = _replay_rows(tables, name, conv, with_history)
    return rows if limit is None else itertools.islice(rows, limit)


def _replay_rows(
    tables: DatasetTables, name: str, conv: Conversation, with_history: bool
) -> Iterator[dict[str, Any]]:
    current: str | None = None
    history: list[dict[str, str]] = []
    before: list[dict[str, str]] = []
    turn = 0
    for session, role, content, at, row in tables.messages_by_session(name, conv):
        if session != current:
            current, history, before, turn = session, [], [], 0
        if role == "system":
            continue
        # `at` (the order value) is not sent: context shards cut at gaps in time by it.
        message = {"role": role, "content": content, "at": at}
        if role == "user":
            values = {
                **json.loads(row),
                SESSION_KEY: session,
                TURN_NO_KEY: turn,
                TURN_KEY: message,
                BEFORE_KEY: before,
            }
            if with_history:
                values[CONVERSATION_KEY] = History(history, len(history))
            yield values
            before, turn = [], turn + 1
        else:
            before.append(message)
        if with_history:
            history.append(message)


class History(Sequence[dict[str, str]]):
    """The first `end` messages of a session's history list, without copying them: the
    list only grows, so the view stays what it was when it was taken."""

    def __init__(self, messages: list[dict[str, str]], end: int) -> None:
        self.messages = messages
        self.end = end

    def __len__(self) -> int:
        return self.end

    def __iter__(self) -> Iterator[dict[str, str]]:
        return itertools.islice(self.messages, self.end)

    @overload
    def __getitem__(self, index: int) -> dict[str, str]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, str]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, str] | list[dict[str, str]]:
        if isinstance(index, slice):
            return self.messages[: self.end][index] if index.step else self._slice(index)
        if index < 0:
            index += self.end
        if not 0 <= index < self.end:
            raise IndexError(index)
        return self.messages[index]

    def _slice(self, index: slice) -> list[dict[str, str]]:
        start, stop, _ = index.indices(self.end)
        return self.messages[start:stop]


def is_turn_row(values: Mapping[str, Any]) -> bool:
    """Whether a row is a replayed turn stored as its part of the history (BEFORE_KEY),
    not with the whole history before it (runs planned before that: CONVERSATION_KEY)."""
    return BEFORE_KEY in values


def history_of(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The history before a turn: its session's earlier turn rows, in order (each its
    BEFORE_KEY messages, then its TURN_KEY), then the turn's own row's BEFORE_KEY."""
    history: list[dict[str, str]] = []
    for values in rows:
        history.extend(values.get(BEFORE_KEY) or ())
        turn = values.get(TURN_KEY)
        if turn is not None:
            history.append(turn)
    return history


def with_history(values: Mapping[str, Any], earlier: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A turn's row with the history before it (CONVERSATION_KEY) put together from its
    session's `earlier` rows: what the views and the audit render it from. Any other row
    (or one stored with its history) is returned as it is."""
    if not is_turn_row(values):
        return dict(values)
    history = history_of(earlier)
    history.extend(values.get(BEFORE_KEY) or ())
    return {**values, CONVERSATION_KEY: history}


def turn_of(values: Mapping[str, Any]) -> int:
    """A replayed turn's place in its session (0 for the first user message)."""
    number = values.get(TURN_NO_KEY)
    if number is not None:
        return int(number)
    return sum(1 for m in values.get(CONVERSATION_KEY) or () if m["role"] == "user")


def generated_history(
    logged: Sequence[Mapping[str, str]], answers: list[str]
) -> list[dict[str, str]]:
    """The conversation before a turn as `history: generated` sends it: the session's
    user messages as logged, each followed by the model's own answer to it (one answer
    per earlier user message, in order); logged answers are not sent, but what the log
    holds before the first user message (an agent's greeting) is, as logged."""
    first_user = next((i for i, m in enumerate(logged) if m["role"] == "user"), len(logged))
    history = [dict(m) for m in logged[:first_user]]
    users = [m for m in logged if m["role"] == "user"]
    for message, answer in zip(users, answers, strict=True):
        # The answer came right after its message, as far as gaps in time go.
        at = message.get("at", "")
        history += [
            {"role": "user", "content": message["content"], "at": at},
            {"role": "assistant", "content": answer, "at": at},
        ]
    return history


def conversation_of(values: Mapping[str, Any], answers: list[str] | None) -> list[dict[str, str]]:
    """The conversation before a replayed turn: as logged, or with the model's own
    `answers` (`generated_history`); empty for a row that is not a replayed turn."""
    logged = values.get(CONVERSATION_KEY) or []
    return generated_history(logged, answers) if answers is not None and logged else list(logged)


def with_conversation(
    messages: list[dict[str, str]],
    values: Mapping[str, Any] | Any,
    answers: list[str] | None = None,
) -> list[dict[str, str]]:
    """A replayed turn's messages: the prompt version's, with the conversation before the
    turn (its row's CONVERSATION_KEY, or with the model's own `answers` in place of the
    logged ones: `generated_history`) put before the version's last user message, which
    is the turn itself (written with the log's content column, `{{ content }}`).
    Messages of one role in a row (a customer who wrote twice) are joined into one, as
    providers want turns to alternate. Any other row's messages are as they are."""
    conversation = values.get(CONVERSATION_KEY) if isinstance(values, Mapping) else None
    if conversation and answers is not None:
        conversation = generated_history(conversation, answers)
    if not conversation:
        return messages
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    sent = [*messages[:last_user], *conversation, *messages[last_user:]]
    joined: list[dict[str, str]] = []
    for message in sent:
        if joined and joined[-1]["role"] == message["role"] != "system":
            joined[-1] = {
                **joined[-1],
                "content": f"{joined[-1]['content']}\n\n{message['content']}",
            }
        else:
            joined.append({"role": message["role"], "content": message["content"]})
    return joined
