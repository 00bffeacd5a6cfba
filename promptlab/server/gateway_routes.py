"""The live gateway's routes: `POST /v1/chat/completions` (OpenAI's format) and
`POST /v1/messages` (Anthropic's), streamed and not.

An application calls them with its SDK's `base_url` at the server and a gateway token
(promptlab/gateway/ does the work; gateway/answer.py writes the answer). Both routes are
async and hold no thread: the body is read by hand, the call waits on the engine's loop
for its answer, and a stream is passed on piece by piece.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from promptlab.engine.send.lanes import LiveLane
from promptlab.gateway.answer import DOORS, serve_call
from promptlab.gateway.calls import anthropic_call, openai_call
from promptlab.gateway.journal import CallJournal, journal_path
from promptlab.gateway.service import Gateway, checked
from promptlab.gateway.targets import Targets
from promptlab.server.principals import principal_of
from promptlab.store.live_calls import LiveCallStore
from promptlab.workbench import Workbench


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
            door = DOORS.get(scope["path"])
        if door is None:
            await self.app(scope, receive, send)
            return
        parse, wire = door
        request = Request(scope, receive)
        caller = principal_of(scope).name
        response = await serve_call(self.gateways.get(), request, parse, wire, caller)
        await response(scope, receive, send)


def add_gateway_routes(app: FastAPI, gateways: Gateways, auth: list[Any]) -> None:
    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat_completions(request: Request) -> Response:
        """OpenAI's Chat Completions: `model` is experiment:NAME, prompt:NAME@label or
        prompt:NAME@1.2.0; the unit is `user` (or the Promptlab-Unit header); the
        template's variables are `variables`; `stream: true` answers server-sent events."""
        caller = principal_of(request.scope).name
        return await serve_call(gateways.get(), request, openai_call, "openai", caller)

    @app.post("/v1/messages", dependencies=auth)
    async def messages(request: Request) -> Response:
        """Anthropic's Messages API, as the chat route: the unit is metadata.user_id."""
        caller = principal_of(request.scope).name
        return await serve_call(gateways.get(), request, anthropic_call, "anthropic", caller)
