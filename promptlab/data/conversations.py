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
from collections.abc import Iterator, Mapping
from typing import Any

from promptlab.errors import DatasetError
from promptlab.records import Conversation
from promptlab.store.datasets import DatasetTables, DatasetWrites
from promptlab.store.samples import SESSION_KEY

ROLES = ("system", "user", "assistant")
#: The key of a replayed turn's row holding the session's messages before it, as
#: logged: sent before the prompt version's last user message (the turn itself).
CONVERSATION_KEY = "__conversation__"
#: The key of a replayed turn's row holding its own message as the history holds it
#: (role, content, order value): context shards are cut with it (data/shards.py).
TURN_KEY = "__turn__"


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
    tables: DatasetTables, name: str, conv: Conversation, limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """A row per user message (the first `limit`), sessions in order: the message's
    own row, with the session's messages before it as logged (CONVERSATION_KEY). A
    logged system message is not sent: the prompt version's messages take its place.
    One session's messages are held at a time."""
    rows = _replay_rows(tables, name, conv)
    return rows if limit is None else itertools.islice(rows, limit)


def _replay_rows(tables: DatasetTables, name: str, conv: Conversation) -> Iterator[dict[str, Any]]:
    current: str | None = None
    history: list[dict[str, str]] = []
    for session, role, content, at, row in tables.messages_by_session(name, conv):
        if session != current:
            current, history = session, []
        if role == "system":
            continue
        # `at` (the order value) is not sent: context shards cut at gaps in time by it.
        message = {"role": role, "content": content, "at": at}
        if role == "user":
            yield {**json.loads(row), CONVERSATION_KEY: list(history), SESSION_KEY: session,
                   TURN_KEY: message}  # fmt: skip
        history.append(message)


def turn_of(values: Mapping[str, Any]) -> int:
    """A replayed turn's place in its session (0 for the first user message)."""
    return sum(1 for m in values.get(CONVERSATION_KEY) or () if m["role"] == "user")


def generated_history(logged: list[dict[str, str]], answers: list[str]) -> list[dict[str, str]]:
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
