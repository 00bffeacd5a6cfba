"""One access line per request the API answers, from promptlab's own logger.

uvicorn writes access lines on the `uvicorn.access` logger, which every uvicorn server
in a process shares. Beside the app, Streamlit runs a uvicorn server of its own, and
its configuration empties that logger's handlers when it starts (Streamlit turns its
own access lines off): the API beside the app wrote one access line, then none. So the
API writes its own, on `promptlab.server.access`, with who asked: method, path (no
query string), status, milliseconds to the response's start, the principal's name and
role (`-` before the guard knew one), and the client's address. They go out where
promptlab's lines go (stderr; one JSON object each when PROMPTLAB_LOG_FORMAT=json), at
INFO, which is on in JSON mode (a server's collector expects a line per request) and
off in text mode, as uvicorn's were.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from promptlab.audit.logjson import json_logs_asked

log = logging.getLogger("promptlab.server.access")


def access_lines_on() -> None:
    """Access lines on in JSON mode (their logger at INFO), off otherwise."""
    log.setLevel(logging.INFO if json_logs_asked() else logging.WARNING)


class AccessLog:
    """Pure ASGI middleware, outermost: it sees every answer, refusals included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: list[int] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                _line(scope, message["status"], time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            if not status:  # no answer went: what the client sees is a 500
                _line(scope, 500, time.perf_counter() - started)
            raise


def _line(scope: Scope, status: int, seconds: float) -> None:
    principal: Any = scope.get("state", {}).get("principal")
    client = scope.get("client")
    log.info(
        "%s %s %d",
        scope["method"],
        scope["path"],
        status,
        extra={
            "method": scope["method"],
            "path": scope["path"],
            "status": status,
            "duration_ms": round(seconds * 1000, 2),
            "principal": getattr(principal, "name", "-"),
            "role": getattr(principal, "role", "-"),
            "client": f"{client[0]}:{client[1]}" if client else "-",
        },
    )
