"""`promptlab gateway`: the live gateway's routes in a process of their own, beside the owner.

It holds no database. What to serve, and who may call, it reads from the owner's snapshot
in Redis (relay.py: every 0.25 s, from the last one that verified while the owner or
Redis is away); each answered call goes to its own journal file first (journal.py: on
disk before the call's last byte goes out), and from there, sealed, to the records
stream the owner stores from. A gateway killed -9 folds what its journal holds when it
starts again on the same state folder; one that cannot reach Redis keeps the calls in
its journal until it can. Its endpoints and keys are its own providers file's, and
each endpoint's limiter is this process's: give each gateway its share of a limit.

Routes: the owner's `POST /v1/chat/completions` and `POST /v1/messages` (gateway
tokens only), `POST /v1/feedback/events` (queued for the owner: 202 and how many), and
`GET /healthz` (no token: whether a snapshot is held, and from when).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from promptlab.clock import SYSTEM_CLOCK
from promptlab.data.feedback_events import events_of
from promptlab.engine.send.lanes import EndpointPool, LiveLane
from promptlab.errors import ConfigError, FeedbackError, NotFoundError
from promptlab.gateway.answer import DOORS, serve_call
from promptlab.gateway.calls import CallRefused
from promptlab.gateway.journal import CallJournal
from promptlab.gateway.relay import RecordSender, SnapshotFollower
from promptlab.gateway.service import Gateway, checked
from promptlab.gateway.snapshot import Snapshot
from promptlab.gateway.targets import Targets
from promptlab.providers import build_provider
from promptlab.providers.config import EndpointConfig
from promptlab.server.access import AccessLog, access_lines_on
from promptlab.server.refusals import error_response

try:  # POSIX: one gateway per state folder
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms the suite runs on
    fcntl = None  # type: ignore[assignment]

FEEDBACK_PATH, HEALTH_PATH = "/v1/feedback/events", "/healthz"
#: Largest body a call or a feedback post may have (the owner's bound).
MAX_BODY_BYTES = 8 * 1024 * 1024


class StandaloneLanes:
    """This process's providers and limiters, the limiters on a loop thread of their own
    (as the engine's are on its loop: gateway/sending.py asks for permits there)."""

    def __init__(self, endpoints: Mapping[str, EndpointConfig]) -> None:
        self._endpoints = dict(endpoints)
        self._pool = EndpointPool(build_provider, SYSTEM_CLOCK)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="promptlab-limiters", daemon=True
        )
        self._thread.start()

    def live_lane(self, endpoint: str) -> LiveLane:
        cfg = self._endpoints.get(endpoint)
        if cfg is None:
            known = ", ".join(sorted(self._endpoints))
            raise ConfigError(f"no endpoint named {endpoint!r} in this gateway's (known: {known})")

        async def opened() -> Any:
            return self._pool.live(cfg)

        provider, limiter = asyncio.run_coroutine_threadsafe(opened(), self._loop).result(30)
        return LiveLane(cfg, provider, limiter, self._loop)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class StateFolder:
    """The gateway's folder: its journal, locked while the gateway lives."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.journal = folder / "calls.jsonl"
        self._fd = os.open(folder / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
        if fcntl is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(self._fd)
                raise ConfigError(
                    f"another gateway uses {folder}: give this one its own --state-dir"
                ) from None

    def close(self) -> None:
        os.close(self._fd)


class StandaloneGateway:
    """The parts of one gateway process; `app` is its ASGI application."""

    def __init__(
        self,
        client: redis.Redis,
        secret: bytes,
        endpoints: Mapping[str, EndpointConfig],
        state: StateFolder,
        name: str,
        fold_s: float,
    ) -> None:
        self.name = name
        self.follower = SnapshotFollower(client, secret)
        self.sender = RecordSender(client, secret, name)
        self.lanes = StandaloneLanes(endpoints)
        self._state = state
        targets = Targets(lambda n: self._snapshot().experiment(n), self._resolve)

        def fold(calls: Any) -> int:
            return self.sender.calls([checked(dict(call), targets) for call in calls])

        self.journal = CallJournal(state.journal, fold, fold_s)
        self.gateway = Gateway(targets, self.lanes, self.journal, SYSTEM_CLOCK.now)
        self.app = GatewayApp(self)

    def start(self) -> StandaloneGateway:
        self.follower.start()
        return self

    def close(self) -> None:
        """Hand what the journal holds to Redis (kept in the file if Redis is away)."""
        with contextlib.suppress(redis.RedisError):
            self.journal.close()
        self.follower.stop()
        self.lanes.close()
        self._state.close()

    def _snapshot(self) -> Snapshot:
        snapshot = self.follower.snapshot
        if snapshot is None:
            raise CallRefused(503, f"no snapshot from the owner yet: {self.follower.problem}")
        return snapshot

    def _resolve(self, ref: str) -> Any:
        try:
            return self._snapshot().resolve(ref)
        except NotFoundError:
            # A call that read its experiment from the snapshot just replaced.
            previous = self.follower.previous
            if previous is None:
                raise
            return previous.resolve(ref)

    def queue_feedback(self, body: Any, caller: str) -> int:
        """Check the events as the owner's route does, then queue them for the owner
        after every call answered so far (the owner stores the stream in order). An
        event without a `time` gets this gateway's: when it arrived, not when stored."""
        try:
            checked_events = events_of(body)
        except FeedbackError as exc:
            raise CallRefused(422, str(exc)) from None
        events = body.get("events", [body])
        now = SYSTEM_CLOCK.now().isoformat()
        events = [event if event.get("time") else {**event, "time": now} for event in events]
        self.journal.flush()
        self.sender.feedback({"caller": caller, "events": events})
        return len(checked_events)


class GatewayApp:
    """Pure ASGI: a token from the snapshot, a bounded body, then the call or the event."""

    def __init__(self, parts: StandaloneGateway) -> None:
        self.parts = parts
        #: What the server closes on its loop as it stops (server/run.py StoppingServer).
        self.state = SimpleNamespace(gateways=self)
        access_lines_on()
        self._logged = AccessLog(self._route)  # an access line per answer, refusals too

    async def aclose_connections(self) -> None:
        await self.parts.gateway.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._logged(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._answer(scope, receive)
        await response(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive) -> Response:
        path, method = scope["path"], scope["method"]
        if path == HEALTH_PATH and method == "GET":
            return self._health()
        headers = dict(scope["headers"])
        caller = self._caller(headers.get(b"authorization", b""))
        if caller is None:
            return error_response(401, "missing or wrong token (Authorization: Bearer TOKEN)")
        # Who asked, for the access line (server/access.py reads a principal's name, role).
        scope.setdefault("state", {})["principal"] = SimpleNamespace(name=caller, role="gateway")
        if method != "POST" or (path not in DOORS and path != FEEDBACK_PATH):
            return error_response(404, f"a gateway answers {', '.join(DOORS)} and {FEEDBACK_PATH}")
        length = headers.get(b"content-length")
        if length is None:
            return error_response(411, "send a Content-Length (bodies are bounded)")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return error_response(413, f"request body over {MAX_BODY_BYTES:,} bytes")
        request = Request(scope, receive)
        if path == FEEDBACK_PATH:
            return await self._feedback(request, caller)
        parse, wire = DOORS[path]
        return await serve_call(self.parts.gateway, request, parse, wire, caller)

    def _caller(self, authorization: bytes) -> str | None:
        given = authorization.decode("latin-1").removeprefix("Bearer ").strip()
        snapshot = self.parts.follower.snapshot
        if not given or snapshot is None:
            return None
        found = snapshot.caller(hashlib.sha256(given.encode()).hexdigest())
        return found.name if found is not None else None

    async def _feedback(self, request: Request, caller: str) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return error_response(422, "body: not JSON")
        try:
            queued = await run_in_threadpool(self.parts.queue_feedback, body, caller)
        except CallRefused as refused:
            return error_response(refused.status, refused.message)
        except redis.RedisError as exc:
            message = f"the broker is unreachable ({exc}); send again (ids dedupe)"
            return error_response(503, message)
        return Response(orjson.dumps({"queued": queued}), 202, media_type="application/json")

    def _health(self) -> Response:
        follower = self.parts.follower
        held = follower.snapshot
        body = {
            "gateway": self.parts.name,
            "snapshot_built_at": held.built_at if held else None,
            "problem": follower.problem,
        }
        return Response(orjson.dumps(body), 200 if held else 503, media_type="application/json")
