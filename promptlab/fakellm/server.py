"""fakellm: the simulated model served over HTTP, in OpenAI and Anthropic wire format.

Loopback only. `POST /v1/chat/completions` (OpenAI, streaming included), `POST
/v1/messages` (Anthropic), `GET /_stats`, `GET /_requests` (the last request bodies
received, for tests to assert on), `POST /_reset`. Requests are checked as the real
APIs check them: unknown fields and out-of-range values get the same 400s.

Rate limits are continuous token buckets that hold `burst_s` seconds' worth of the
per-minute limit; a request costs one request and its estimated prompt tokens plus
`max_tokens`, and a rejected request costs nothing. A request larger than the bucket
(but within the per-minute limit) is admitted once the bucket is full, leaving it in
debt, as the real APIs do.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import random
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from promptlab.fakellm import wire
from promptlab.providers.simulator import SIMULATED_LABEL, FaultRates, simulate
from promptlab.providers.tokens import estimate_prompt_tokens

#: The header adapters put the item's idempotency key in (see providers/openai.py).
REQUEST_ID_HEADER = "x-client-request-id"
#: How long the runner waits for held requests (timeout fault) when stopping.
SHUTDOWN_TIMEOUT_S = 0.5
#: How many received requests `/_requests` keeps: enough for a test, bounded under load.
RECENT_REQUESTS = 100
#: Request headers recorded with each body; never the key headers.
RECORDED_HEADERS = ("anthropic-version", REQUEST_ID_HEADER, "content-type")


@dataclass(frozen=True)
class FakeLLMConfig:
    """Every fakellm switch; rates are shares of attempts in [0, 1]."""

    host: str = "127.0.0.1"
    port: int = 8011
    rpm: int | None = None
    tpm: int | None = None
    burst_s: float = 10.0
    latency_ms: float = 0.0
    #: Wait the simulated (lognormal + per-token) latency instead of `latency_ms`.
    sim_latency: bool = False
    latency_scale: float = 1.0
    fail_rate: float = 0.0
    timeout_rate: float = 0.0
    #: A timeout fault holds the request this long: longer than any client timeout.
    timeout_hold_s: float = 120.0
    malformed_rate: float | None = None
    quota_rate: float = 0.0
    overloaded_rate: float = 0.0
    reset_rate: float = 0.0
    #: Share of 400s whose message echoes the caller's key header verbatim (for tests
    #: that check keys are scrubbed from stored errors).
    echo_auth_rate: float = 0.0
    #: Share of answers sent as a 200 whose JSON body is cut off half-way (a proxy or
    #: server bug), for tests that check a malformed body is a server error.
    garbled_rate: float = 0.0
    seed: int = 0
    #: How many received request bodies `/_requests` keeps (a test may want a whole run).
    record_requests: int = RECENT_REQUESTS
    #: When set, requests must carry this key (`Authorization: Bearer` / `x-api-key`).
    api_key: str | None = None
    #: When set, prompt + max_tokens beyond it is rejected with a context-length 400.
    context_window: int | None = None

    def __post_init__(self) -> None:
        rates = (
            self.fail_rate, self.timeout_rate, self.quota_rate, self.overloaded_rate,
            self.reset_rate, self.echo_auth_rate, self.garbled_rate,
        )  # fmt: skip
        if any(r < 0 or r > 1 for r in rates) or sum(rates) > 1 + 1e-9:
            raise ValueError("fault rates must be in [0, 1] and add up to at most 1")
        if self.burst_s <= 0:
            raise ValueError("burst_s must be positive")


class TokenBucket:
    """A continuous token bucket: `per_minute / 60` per second, holding `burst_s` worth."""

    def __init__(self, per_minute: int, burst_s: float, now: float) -> None:
        self.limit = per_minute
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_s)
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_s(self, cost: float) -> float:
        """Seconds until `cost` can be taken (0 if now); costs above capacity need a full bucket."""
        need = min(cost, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.level) / self.rate)


@dataclass
class Stats:
    """What the server has seen since start (or the last reset)."""

    attempts: int = 0
    successes: int = 0
    rate_limited: int = 0
    quota: int = 0
    server_errors: int = 0
    timeouts: int = 0
    resets: int = 0
    bad_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    tokens_admitted: int = 0
    completed_ids: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        counts = data.pop("completed_ids")
        twice = {rid: n for rid, n in counts.items() if n > 1}
        data["completed_twice"] = len(twice)
        data["duplicate_completions"] = sum(n - 1 for n in twice.values())
        data["duplicate_ids"] = sorted(twice)[:100]
        return data


class Limiter:
    """RPM and TPM buckets, checked together so a rejected request takes nothing."""

    def __init__(self, rpm: int | None, tpm: int | None, burst_s: float) -> None:
        now = time.monotonic()
        self.requests = TokenBucket(rpm, burst_s, now) if rpm else None
        self.tokens = TokenBucket(tpm, burst_s, now) if tpm else None

    def try_acquire(self, cost: int) -> tuple[bool, float, str]:
        """(admitted, retry-after seconds, which limit) for one request costing `cost` tokens."""
        now = time.monotonic()
        waits: list[tuple[float, str]] = []
        for bucket, amount, name in ((self.requests, 1, "requests"), (self.tokens, cost, "tokens")):
            if bucket is not None:
                bucket.refill(now)
                waits.append((bucket.wait_s(amount), name))
        wait, which = max(waits, default=(0.0, ""))
        if wait > 0:
            return False, wait, which
        if self.requests is not None:
            self.requests.level -= 1
        if self.tokens is not None:
            self.tokens.level -= cost
        return True, 0.0, ""

    def openai_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for bucket, name in ((self.requests, "requests"), (self.tokens, "tokens")):
            if bucket is not None:
                headers[f"x-ratelimit-limit-{name}"] = str(bucket.limit)
                headers[f"x-ratelimit-remaining-{name}"] = str(max(0, int(bucket.level)))
                headers[f"x-ratelimit-reset-{name}"] = wire.openai_duration(bucket.reset_s())
        return headers

    def anthropic_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for bucket, name in ((self.requests, "requests"), (self.tokens, "tokens")):
            if bucket is not None:
                prefix = f"anthropic-ratelimit-{name}"
                headers[f"{prefix}-limit"] = str(bucket.limit)
                headers[f"{prefix}-remaining"] = str(max(0, int(bucket.level)))
                headers[f"{prefix}-reset"] = wire.anthropic_reset(bucket.reset_s())
        return headers


class _Reset(Exception):
    """Raised after the transport was aborted: there is nobody left to answer."""


class FakeLLM:
    """The server state: config, buckets, the fault stream and the stats."""

    def __init__(self, config: FakeLLMConfig) -> None:
        self.config = config
        self.rates = FaultRates(malformed=config.malformed_rate)
        self._ids = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        self.stats = Stats()
        self.received: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=self.config.record_requests
        )
        self.limiter = Limiter(self.config.rpm, self.config.tpm, self.config.burst_s)
        # One draw per attempt from a seeded stream: a retry can succeed where the
        # first attempt failed, and a run with the same seed and order sees the same faults.
        self._faults = random.Random(self.config.seed)

    def _draw_fault(self) -> str | None:
        c = self.config
        draw = self._faults.random()
        for name, rate in (
            ("quota", c.quota_rate), ("reset", c.reset_rate), ("timeout", c.timeout_rate),
            ("overloaded", c.overloaded_rate), ("fail", c.fail_rate),
            ("echo_auth", c.echo_auth_rate), ("garbled", c.garbled_rate),
        ):  # fmt: skip
            if draw < rate:
                return name
            draw -= rate
        return None

    def _authorized(self, request: web.Request) -> bool:
        key = self.config.api_key
        if key is None:
            return True
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return key in (bearer, request.headers.get("x-api-key", ""))

    async def openai_handler(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, anthropic=False)

    async def anthropic_handler(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, anthropic=True)

    async def _handle(self, request: web.Request, *, anthropic: bool) -> web.StreamResponse:
        stats = self.stats
        stats.attempts += 1
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            return await self._serve(request, anthropic)
        finally:
            stats.in_flight -= 1

    async def _serve(self, request: web.Request, anthropic: bool) -> web.StreamResponse:
        stats = self.stats
        rid = f"req_{next(self._ids):012x}"
        errors = _Errors(anthropic, rid, self.limiter)
        if not self._authorized(request):
            stats.bad_requests += 1
            return errors.auth()
        raw = await request.read()
        request_id = request.headers.get(REQUEST_ID_HEADER)
        try:
            body = json.loads(raw)
        except ValueError as exc:
            self._record(request, raw.decode("utf-8", "replace"), anthropic)
            stats.bad_requests += 1
            return errors.bad_request(f"We could not parse the JSON body of your request: {exc}")
        self._record(request, body, anthropic)
        try:
            if anthropic:
                version = request.headers.get("anthropic-version")
                parsed = wire.parse_anthropic(body, request_id, version)
            else:
                parsed = wire.parse_openai(body, request_id)
        except wire.WireError as exc:
            stats.bad_requests += 1
            return errors.bad_request(str(exc), exc.param, exc.code)
        req = parsed.completion
        fault = self._draw_fault()
        if fault == "echo_auth":
            stats.bad_requests += 1
            return errors.echo_auth(_key_header(request, anthropic))
        if fault == "quota":
            stats.quota += 1
            return errors.quota()
        prompt_tokens = estimate_prompt_tokens(req.messages)
        window = self.config.context_window
        if window is not None and prompt_tokens + req.max_tokens > window:
            stats.bad_requests += 1
            return errors.context_length(prompt_tokens, req.max_tokens, window)
        admitted, wait_s, which = self.limiter.try_acquire(prompt_tokens + req.max_tokens)
        if not admitted:
            stats.rate_limited += 1
            return errors.rate_limited(req.model, which, wait_s, prompt_tokens + req.max_tokens)
        stats.tokens_admitted += prompt_tokens + req.max_tokens
        if fault == "reset":
            stats.resets += 1
            if request.transport is not None:
                request.transport.abort()
            raise _Reset
        if fault == "timeout":
            stats.timeouts += 1
            await asyncio.sleep(self.config.timeout_hold_s)
        if fault in ("overloaded", "fail"):
            stats.server_errors += 1
            return errors.overloaded() if fault == "overloaded" else errors.server()
        out = simulate(
            req, req.model, seed=self.config.seed, rates=self.rates, prompt_tokens=prompt_tokens
        )
        delay_ms = (
            out.latency_ms * self.config.latency_scale
            if self.config.sim_latency
            else self.config.latency_ms
        )
        headers = errors.limit_headers()
        headers["openai-processing-ms" if not anthropic else "x-fakellm-processing-ms"] = str(
            int(delay_ms)
        )
        headers["x-fakellm"] = SIMULATED_LABEL
        model = f"{req.model}-{SIMULATED_LABEL}"
        usage = (out.input_tokens, out.output_tokens)
        resp_id = ("msg_" if anthropic else "chatcmpl-") + rid.removeprefix("req_")
        if parsed.stream:
            response = await self._stream(
                request, headers, delay_ms, anthropic, resp_id, model, out.text,
                out.finish_reason, usage, parsed.include_usage,
            )  # fmt: skip
        else:
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
            make = wire.anthropic_message if anthropic else wire.openai_completion
            payload = make(resp_id, model, out.text, out.finish_reason, usage)
            if fault == "garbled":
                stats.server_errors += 1
                payload = payload[: len(payload) // 2]
            response = web.Response(body=payload, content_type="application/json", headers=headers)
        if fault == "garbled":
            return response  # counted as a server error above, not as a completion
        stats.successes += 1
        if req.request_id:
            stats.completed_ids[req.request_id] = stats.completed_ids.get(req.request_id, 0) + 1
        return response

    async def _stream(
        self, request: web.Request, headers: dict[str, str], delay_ms: float, anthropic: bool,
        resp_id: str, model: str, text: str, finish: Any, usage: tuple[int, int],
        include_usage: bool,
    ) -> web.StreamResponse:  # fmt: skip
        response = web.StreamResponse(headers=headers)
        response.content_type = "text/event-stream"
        response.headers["Cache-Control"] = "no-cache"
        events = (
            wire.anthropic_stream(resp_id, model, text, finish, usage)
            if anthropic
            else wire.openai_stream(resp_id, model, text, finish, usage, include_usage)
        )
        chunks = list(events)
        await response.prepare(request)
        # Spread the latency: a third before the first event (time to first token),
        # the rest evenly across the chunks, like a model generating.
        if delay_ms > 0:
            per_chunk_s = delay_ms * 2 / 3 / 1000 / max(1, len(chunks))
            await asyncio.sleep(delay_ms / 3 / 1000)
            for chunk in chunks:
                await response.write(chunk)
                await asyncio.sleep(per_chunk_s)
        else:
            # No pacing asked for: the same bytes in one write, one syscall.
            await response.write(b"".join(chunks))
        await response.write_eof()
        return response

    def _record(self, request: web.Request, body: Any, anthropic: bool) -> None:
        headers = {h: request.headers[h] for h in RECORDED_HEADERS if h in request.headers}
        route = "anthropic" if anthropic else "openai"
        self.received.append({"route": route, "headers": headers, "body": body})

    async def requests_handler(self, _request: web.Request) -> web.Response:
        return web.json_response(list(self.received))

    async def stats_handler(self, _request: web.Request) -> web.Response:
        data = self.stats.as_json()
        data["config"] = asdict(self.config)
        data["config"].pop("api_key", None)
        return web.json_response(data)

    async def reset_handler(self, _request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    async def not_found(self, request: web.Request) -> web.Response:
        body = wire.openai_error(
            f"Invalid URL ({request.method} {request.path})", "invalid_request_error", None
        )
        return web.Response(status=404, body=body, content_type="application/json")


class _Errors:
    """Error responses in one wire format, with the real APIs' bodies and headers."""

    def __init__(self, anthropic: bool, rid: str, limiter: Limiter) -> None:
        self.anthropic = anthropic
        self.rid = rid
        self.limiter = limiter

    def limit_headers(self) -> dict[str, str]:
        if self.anthropic:
            return {"request-id": self.rid, **self.limiter.anthropic_headers()}
        return {"x-request-id": self.rid, **self.limiter.openai_headers()}

    def _respond(
        self, status: int, message: str, err_type: str, code: str | None,
        extra: dict[str, str] | None = None, should_retry: bool | None = None,
        param: str | None = None,
    ) -> web.Response:  # fmt: skip
        headers = self.limit_headers()
        headers.update(extra or {})
        if should_retry is not None:
            headers["x-should-retry"] = "true" if should_retry else "false"
        if self.anthropic:
            body = wire.anthropic_error(status, message, self.rid)
        else:
            body = wire.openai_error(message, err_type, code, param)
        return web.Response(
            status=status, body=body, content_type="application/json", headers=headers
        )

    def auth(self) -> web.Response:
        message = "Incorrect API key provided." if not self.anthropic else "invalid x-api-key"
        return self._respond(401, message, "invalid_request_error", "invalid_api_key")

    def bad_request(
        self, message: str, param: str | None = None, code: str | None = None
    ) -> web.Response:
        return self._respond(400, message, "invalid_request_error", code, param=param)

    def echo_auth(self, key_header: str) -> web.Response:
        """A 400 whose message carries the caller's key header, as some proxies do."""
        return self._respond(
            400, f"invalid request from {key_header}", "invalid_request_error", None
        )

    def context_length(self, prompt: int, max_tokens: int, window: int) -> web.Response:
        if self.anthropic:
            message = (
                f"input length and `max_tokens` exceed context limit: {prompt} + {max_tokens} "
                f"> {window}, decrease input length or `max_tokens` and try again"
            )
        else:
            message = (
                f"This model's maximum context length is {window} tokens. However, you "
                f"requested {prompt + max_tokens} tokens ({prompt} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages "
                "or completion."
            )
        return self._respond(400, message, "invalid_request_error", "context_length_exceeded")

    def quota(self) -> web.Response:
        if self.anthropic:
            # Anthropic's answer when credit runs out: 402 billing_error (PaymentRequiredError).
            return self._respond(
                402, "Your credit balance is too low to access the Anthropic API.",
                "billing_error", None, should_retry=False,
            )  # fmt: skip
        message = (
            "You exceeded your current quota, please check your plan and billing details. "
            "For more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors."
        )
        return self._respond(
            429, message, "insufficient_quota", "insufficient_quota", should_retry=False
        )

    def rate_limited(self, model: str, which: str, wait_s: float, cost: int) -> web.Response:
        bucket = self.limiter.requests if which == "requests" else self.limiter.tokens
        limit = bucket.limit if bucket else 0
        if self.anthropic:
            unit = "requests" if which == "requests" else "input tokens"
            message = (
                f"This request would exceed the rate limit for your organization of {limit} "
                f"{unit} per minute. For details, refer to: "
                "https://docs.claude.com/en/api/rate-limits."
            )
        else:
            unit = "RPM" if which == "requests" else "TPM"
            requested = 1 if which == "requests" else cost
            message = (
                f"Rate limit reached for {model} in organization org-fakellm on {which} per "
                f"min ({unit}): Limit {limit}, Requested {requested}. Please try again in "
                f"{wire.openai_duration(wait_s)}. Visit "
                "https://platform.openai.com/account/rate-limits to learn more."
            )
        return self._respond(
            429, message, which, "rate_limit_exceeded",
            extra=wire.retry_headers(wait_s), should_retry=True,
        )  # fmt: skip

    def overloaded(self) -> web.Response:
        if self.anthropic:
            return self._respond(529, "Overloaded", "overloaded_error", None, should_retry=True)
        # OpenAI has no 529: its overload answer is a 503 with no retry-after.
        message = "Our servers are currently overloaded. Please try again later."
        return self._respond(
            503, message, "service_unavailable_error", "server_is_overloaded", should_retry=True
        )

    def server(self) -> web.Response:
        message = (
            "Internal server error"
            if self.anthropic
            else "The server had an error while processing your request. Sorry about that!"
        )
        return self._respond(500, message, "server_error", None, should_retry=True)


@web.middleware
async def _swallow_resets(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except _Reset:
        # The connection is gone; aiohttp only needs *a* response object to discard.
        return web.Response(status=500)


def _key_header(request: web.Request, anthropic: bool) -> str:
    """The header carrying the caller's key: x-api-key, else Authorization (anthropic>=2
    sends `Authorization: Bearer` on the Anthropic route too)."""
    if anthropic and "x-api-key" in request.headers:
        return request.headers["x-api-key"]
    return request.headers.get("Authorization", "")


SERVER_KEY = web.AppKey("fakellm", FakeLLM)


def create_app(config: FakeLLMConfig) -> web.Application:
    """The aiohttp application serving the simulation with these switches."""
    server = FakeLLM(config)
    app = web.Application(middlewares=[_swallow_resets])
    app[SERVER_KEY] = server
    app.router.add_post("/v1/chat/completions", server.openai_handler)
    app.router.add_post("/v1/messages", server.anthropic_handler)
    app.router.add_get("/_stats", server.stats_handler)
    app.router.add_get("/_requests", server.requests_handler)
    app.router.add_post("/_reset", server.reset_handler)
    app.router.add_route("*", "/{tail:.*}", server.not_found)
    return app


@dataclass(frozen=True)
class RunningServer:
    """A fakellm serving in a background thread."""

    base_url: str
    config: FakeLLMConfig

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    def stats(self) -> dict[str, Any]:
        """GET /_stats."""
        with urllib.request.urlopen(f"{self.base_url}/_stats") as resp:  # noqa: S310 - loopback
            data: dict[str, Any] = json.loads(resp.read())
            return data

    def requests(self) -> list[dict[str, Any]]:
        """GET /_requests: the last request bodies received, oldest first."""
        with urllib.request.urlopen(f"{self.base_url}/_requests") as resp:  # noqa: S310
            data: list[dict[str, Any]] = json.loads(resp.read())
            return data

    def reset(self) -> None:
        """POST /_reset: zero the stats, forget the requests, refill the buckets."""
        req = urllib.request.Request(f"{self.base_url}/_reset", method="POST", data=b"")
        with urllib.request.urlopen(req):  # noqa: S310 - loopback
            pass


@contextlib.contextmanager
def serve_in_thread(config: FakeLLMConfig | None = None) -> Iterator[RunningServer]:
    """Run fakellm on its own loop in a daemon thread; port 0 picks a free port."""
    config = config or FakeLLMConfig(port=0)
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    holder: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(
            create_app(config), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            handler_cancellation=True,
        )  # fmt: skip
        await runner.setup()
        site = web.TCPSite(runner, config.host, config.port)
        await site.start()
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            holder["error"] = exc
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(holder["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="fakellm", daemon=True)
    thread.start()
    ready.wait()
    if "error" in holder:
        raise holder["error"]
    try:
        yield RunningServer(f"http://{config.host}:{holder['port']}", config)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def run(config: FakeLLMConfig, announce: Any = print) -> None:
    """Serve until interrupted (the `promptlab fakellm` command)."""
    try:
        import uvloop  # optional: faster, used only when installed

        uvloop.install()
    except ImportError:
        pass
    base = f"http://{config.host}:{config.port}"
    announce(
        f"fakellm ({SIMULATED_LABEL} model) on {base}  "
        f"OpenAI base_url={base}/v1  Anthropic base_url={base}  stats: {base}/_stats"
    )
    web.run_app(
        create_app(config), host=config.host, port=config.port, access_log=None,
        print=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S, handler_cancellation=True,
    )  # fmt: skip


__all__ = [
    "FakeLLMConfig",
    "RunningServer",
    "TokenBucket",
    "create_app",
    "run",
    "serve_in_thread",
]
