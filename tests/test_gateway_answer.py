"""A streamed gateway answer's writes (promptlab/gateway/answer.py): the head goes with the
first piece at once; pieces that came meanwhile go out together, and the stream's end
leaves with its last piece rather than in a write of its own."""

from __future__ import annotations

import asyncio
from typing import Any

from promptlab.gateway.answer import _DONE, _stream
from promptlab.gateway.replies import reply_for
from promptlab.gateway.sending import Sent
from promptlab.providers.base import CompletionResponse, FinishReason

ANSWER = CompletionResponse("Hello there", 5, 3, FinishReason.STOP, "m", 1.0)


async def writes(first: Any, then: list[Any]) -> list[bytes]:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for piece in then:
        queue.put_nowait(piece)
    task: asyncio.Future[Sent] = asyncio.get_running_loop().create_future()
    task.set_result(Sent(ANSWER, 0.0, 1))
    reply = reply_for("openai", "tr_1", "prompt:greet@latest")
    return [chunk async for chunk in _stream(reply, first, queue, task, usage=False)]


def test_pieces_that_came_meanwhile_and_the_end_go_out_in_one_write() -> None:
    reply = reply_for("openai", "tr_1", "prompt:greet@latest")
    out = asyncio.run(writes("Hel", ["lo", " there", _DONE]))
    assert out == [
        reply.head() + reply.piece("Hel"),
        reply.piece("lo") + reply.piece(" there") + reply.tail(ANSWER, False),
    ]


def test_an_answer_without_pieces_is_its_head_and_its_end() -> None:
    reply = reply_for("openai", "tr_1", "prompt:greet@latest")
    assert asyncio.run(writes(_DONE, [])) == [reply.head() + reply.tail(ANSWER, False)]
