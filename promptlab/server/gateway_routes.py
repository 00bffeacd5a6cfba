"""The live gateway's routes: `POST /v1/chat/completions` (OpenAI's format) and
`POST /v1/messages` (Anthropic's), streamed and not.

An application calls them with its SDK's `base_url` at the server and a gateway token
(promptlab/gateway/ does the work). Both routes are async and hold no thread: the
body is read by hand, the call waits on the engine's loop for its answer, and a
stream is passed on piece by piece. A call that fails before its first piece is an
error in the caller's envelope with the provider's status; the response headers name
what was served (`Promptlab-Variant`, `Promptlab-Version`) and the call's trace.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from promptlab.engine.lanes import LiveLane
from promptlab.errors import ErrorKind, PromptlabError, ProviderError
from promptlab.gateway.calls import CallIn, CallRefused, anthropic_call, openai_call
from promptlab.gateway.journal import CallJournal, journal_path
from promptlab.gateway.replies import Reply, error_body, reply_for
from promptlab.gateway.sending import Sent
from promptlab.gateway.service import Gateway, Prepared, checked
from promptlab.gateway.targets import Targets
from promptlab.server.principals import principal_of
from promptlab.store.live_calls import LiveCallStore
from promptlab.workbench import Workbench

UNIT_HEADER = "promptlab-unit"
#: The status a failed call answers with when the provider's gave none.
_STATUS_OF_KIND = {ErrorKind.TIMEOUT: 504, ErrorKind.CONNECTION: 502}
_DONE = object()

Parse = Callable[[bytes, str | None], CallIn]


class Gateways:
    """The server's one gateway, built at its first call (its journal is a file by the
    database, which a server that never serves a call does not make), or at once when a
    killed server's journal holds calls to fold."""

    def __init__(self, wb: Workbench, experiment: Callable[[str], Any]) -> None:
        self._wb = wb
        self._experiment = experiment
        self._gateway: Gateway | None = None
        self._building = threading.Lock()
        left = journal_path(Path(wb.store.path))
        if left.is_file() and left.stat().st_size > 0:
            self.get()

    def get(self) -> Gateway:
        if self._gateway is None:
            with self._building:
                if self._gateway is None:
                    self._gateway = self._build()
        return self._gateway

    def _build(self) -> Gateway:
        wb = self._wb
        targets = Targets(self._experiment, wb.prompts.resolve)
        live_calls = LiveCallStore(wb.store)

        def fold(calls: Any) -> int:
            return live_calls.add([checked(dict(call), targets) for call in calls])

        class Lanes:  # the engine is made at the first call too
            def live_lane(self, endpoint: str) -> LiveLane:
                return wb.engine.live_lane(endpoint)

        every = wb.settings.gateway_fold_s
        journal = CallJournal(journal_path(Path(wb.store.path)), fold, every)
        return Gateway(targets, Lanes(), journal, wb.store.clock.now)

    def settle(self) -> None:
        """Store every call answered so far: an application sends feedback about a call
        as soon as its answer ends, before the next fold would have stored it."""
        if self._gateway is not None:
            self._gateway.journal.flush()

    async def aclose_connections(self) -> None:
        """Close the gateway's provider connections, on the server's loop as it stops."""
        if self._gateway is not None:
            await self._gateway.aclose()

    def close(self) -> None:
        """Fold what the journal holds and close it (the server is stopping)."""
        if self._gateway is not None:
            self._gateway.journal.close()


#: The gateway's routes by path: how each reads a body, and its wire format.
_DOORS: dict[str, tuple[Parse, str]] = {
    "/v1/chat/completions": (openai_call, "openai"),
    "/v1/messages": (anthropic_call, "anthropic"),
}


class GatewayDoor:
    """Pure ASGI: the gateway's calls answered once the guard and the body bound have let
    them in, before FastAPI's exception layers, router and endpoint wrapper. Those took
    a third of the server's time per call (py-spy under bench/gateway.py), and the
    gateway adds its time to every production call. The routes stay declared on the app
    (add_gateway_routes) for the OpenAPI description and the role table."""

    def __init__(self, app: ASGIApp, gateways: Gateways) -> None:
        self.app = app
        self.gateways = gateways

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        door = None
        if scope["type"] == "http" and scope["method"] == "POST":
            door = _DOORS.get(scope["path"])
        if door is None:
            await self.app(scope, receive, send)
            return
        parse, wire = door
        response = await _serve(self.gateways.get(), Request(scope, receive), parse, wire)
        await response(scope, receive, send)


def add_gateway_routes(app: FastAPI, gateways: Gateways, auth: list[Any]) -> None:
    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat_completions(request: Request) -> Response:
        """OpenAI's Chat Completions: `model` is experiment:NAME, prompt:NAME@label or
        prompt:NAME@1.2.0; the unit is `user` (or the Promptlab-Unit header); the
        template's variables are `variables`; `stream: true` answers server-sent events."""
        return await _serve(gateways.get(), request, openai_call, "openai")

    @app.post("/v1/messages", dependencies=auth)
    async def messages(request: Request) -> Response:
        """Anthropic's Messages API, as the chat route: the unit is metadata.user_id."""
        return await _serve(gateways.get(), request, anthropic_call, "anthropic")


async def _serve(gateway: Gateway, request: Request, parse: Parse, wire: str) -> Response:
    try:
        call = parse(await request.body(), request.headers.get(UNIT_HEADER))
        prepared = gateway.prepare(call)
    except CallRefused as refused:
        return _refusal(wire, refused.status, refused.message, refused.param)
    except PromptlabError as exc:
        return _refusal(wire, 422, str(exc), None)
    caller = principal_of(request.scope).name
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
    yield reply.head() + (reply.piece(first) if first is not _DONE else b"")
    piece = first
    while piece is not _DONE:
        piece = await answers.get()
        if piece is not _DONE:
            yield reply.piece(piece)
    error = task.exception()
    if error is not None:  # after the first piece: the stream ends with the error
        yield reply.stream_error(502, str(error))
        return
    yield reply.tail(task.result().answer, usage)


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
