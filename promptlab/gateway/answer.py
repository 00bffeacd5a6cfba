"""A gateway call answered over HTTP: read, prepared, sent, recorded, and written back
in the caller's wire format, streamed piece by piece or whole.

Shared by the owner's routes (promptlab/server/gateway_routes.py) and the stateless
`promptlab gateway` process (standalone.py). A call that fails before its first piece
is an error in the caller's envelope with the provider's status; the response headers
name what was served (`Promptlab-Variant`, `Promptlab-Version`) and the call's trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from promptlab.errors import ErrorKind, PromptlabError, ProviderError
from promptlab.gateway.calls import CallIn, CallRefused, anthropic_call, openai_call
from promptlab.gateway.replies import Reply, error_body, reply_for
from promptlab.gateway.sending import Sent
from promptlab.gateway.service import Gateway, Prepared

UNIT_HEADER = "promptlab-unit"
#: The status a failed call answers with when the provider's gave none.
_STATUS_OF_KIND = {ErrorKind.TIMEOUT: 504, ErrorKind.CONNECTION: 502}
_DONE = object()

Parse = Callable[[bytes, str | None], CallIn]

#: The gateway's routes by path: how each reads a body, and its wire format.
DOORS: dict[str, tuple[Parse, str]] = {
    "/v1/chat/completions": (openai_call, "openai"),
    "/v1/messages": (anthropic_call, "anthropic"),
}


async def serve_call(
    gateway: Gateway, request: Request, parse: Parse, wire: str, caller: str
) -> Response:
    """Answer one call; `caller` is who the record says made it."""
    try:
        call = parse(await request.body(), request.headers.get(UNIT_HEADER))
        prepared = gateway.prepare(call)
    except CallRefused as refused:
        return _refusal(wire, refused.status, refused.message, refused.param)
    except PromptlabError as exc:
        return _refusal(wire, 422, str(exc), None)
    answers: asyncio.Queue[Any] = asyncio.Queue()
    deliver = answers.put_nowait if call.stream else None
    task = asyncio.ensure_future(gateway.send(prepared, deliver))

    def finished(done: asyncio.Future[Sent]) -> None:
        # Recorded before the last byte goes out; the journal survives a kill.
        error = done.exception() if not done.cancelled() else None
        sent = done.result() if not done.cancelled() and error is None else None
        failure = error if isinstance(error, ProviderError) else None
        gateway.record(prepared, sent, failure, caller)
        answers.put_nowait(_DONE)

    task.add_done_callback(finished)
    first = await answers.get()
    headers = _headers(prepared)
    if first is _DONE and task.exception() is not None:
        return _failure(wire, task.exception(), headers)
    reply = reply_for(call.wire, prepared.trace, call.model)
    if not call.stream:
        return Response(
            reply.whole(task.result().answer), headers=headers, media_type=reply.media_type
        )
    return StreamingResponse(
        _stream(reply, first, answers, task, call.include_usage),
        headers=headers,
        media_type="text/event-stream",
    )


async def _stream(
    reply: Reply, first: Any, answers: asyncio.Queue[Any], task: asyncio.Future[Sent], usage: bool
) -> AsyncIterator[bytes]:
    """The head with the first piece at once; then each write takes every piece that came
    meanwhile, and the last one the stream's end: under load a stream is a few writes,
    not one per piece, and its last byte leaves with its last piece."""
    pieces = [first]
    out = reply.head()
    while pieces[-1] is not _DONE:
        out += b"".join(reply.piece(p) for p in pieces)
        yield out
        pieces, out = [await answers.get()], b""
        while not answers.empty():
            pieces.append(answers.get_nowait())
    out += b"".join(reply.piece(p) for p in pieces[:-1])
    error = task.exception()
    if error is not None:  # after the first piece: the stream ends with the error
        yield out + reply.stream_error(502, str(error))
        return
    yield out + reply.tail(task.result().answer, usage)


def _headers(prepared: Prepared) -> dict[str, str]:
    served = prepared.served
    headers = {"Promptlab-Version": served.version.id, "Promptlab-Trace": prepared.trace}
    if served.variant is not None:
        headers["Promptlab-Variant"] = served.variant
    return headers


def _refusal(wire: str, status: int, message: str, param: str | None) -> Response:
    return Response(error_body(wire, status, message, param), status, media_type="application/json")


def _failure(wire: str, error: BaseException | None, headers: dict[str, str]) -> Response:
    if isinstance(error, CallRefused):  # e.g. the version's endpoint is not configured
        return _refusal(wire, error.status, error.message, error.param)
    if not isinstance(error, ProviderError):
        raise error if error is not None else RuntimeError("no answer and no error")
    status = error.status or _STATUS_OF_KIND.get(error.kind, 502)
    if error.retry_after_s is not None:
        headers = {**headers, "Retry-After": str(max(1, round(error.retry_after_s)))}
    body = error_body(wire, status, f"{error.kind.value}: {error}")
    return Response(body, status, headers=headers, media_type="application/json")
