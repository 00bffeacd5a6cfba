"""The fakellm aiohttp app: routes, request checks, rate limits, faults, simulated answers.

Requests are checked as the real APIs check them: unknown fields and out-of-range
values get the same 400s. Each attempt draws at most one fault from a seeded stream
(quota, reset, timeout, overloaded, server error, a key echoed in a 400, a garbled
body), then the simulated model (promptlab/providers/simulator.py) answers. The Batch
APIs' routes (batch_routes.py) answer each line with `batch_answer`: the same simulation.
What the control routes (`/_stats`, `/_gate`) count and hold is in control.py.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import random
import time
from dataclasses import asdict
from typing import Any

from aiohttp import web

from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.fakellm import wire
from promptlab.fakellm.batch_routes import add_batch_routes
from promptlab.fakellm.batches import BatchStore
from promptlab.fakellm.config import FakeLLMConfig
from promptlab.fakellm.control import AnswerGate, Stats
from promptlab.fakellm.embedding_routes import add_embedding_routes
from promptlab.fakellm.limits import Limiter
from promptlab.fakellm.responses import ErrorResponses, key_header
from promptlab.providers.base import CompletionRequest
from promptlab.providers.simulator import (
    SIMULATED_LABEL,
    FaultRates,
    SimOutput,
    simulate,
    simulated_logprobs,
)
from promptlab.providers.tokens import estimate_prompt_tokens

#: The header adapters put the item's idempotency key in (see providers/openai.py).
REQUEST_ID_HEADER = "x-client-request-id"
#: Request headers recorded with each body; never the key headers.
RECORDED_HEADERS = ("anthropic-version", REQUEST_ID_HEADER, "content-type")


# Not a PromptlabError: an internal signal of the fake server, caught in this module.
class _Reset(Exception):
    """Raised after the transport was aborted: there is nobody left to answer."""


class FakeLLM:
    """The server state: config, buckets, the fault stream and the stats."""

    def __init__(self, config: FakeLLMConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.rates = FaultRates(malformed=config.malformed_rate)
        self._ids = itertools.count(1)
        self.gate = AnswerGate()
        self.batches = BatchStore(config, clock, self.batch_answer)
        self.reset()

    def reset(self) -> None:
        self.stats = Stats()
        self.received: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=self.config.record_requests
        )
        self.limiter = Limiter(
            self.config.rpm,
            self.config.tpm,
            self.config.burst_s,
            self.config.shared_load,
            self.clock,
        )
        # One draw per attempt from a seeded stream: a retry can succeed where the
        # first attempt failed, and a run with the same seed and order sees the same faults.
        self._faults = random.Random(self.config.seed)
        self.batches.clear()

    def _draw_fault(self) -> str | None:
        c = self.config
        draw = self._faults.random()
        for name, rate in (
            ("quota", c.quota_rate),
            ("reset", c.reset_rate),
            ("timeout", c.timeout_rate),
            ("overloaded", c.overloaded_rate),
            ("fail", c.fail_rate),
            ("echo_auth", c.echo_auth_rate),
            ("garbled", c.garbled_rate),
        ):
            if draw < rate:
                return name
            draw -= rate
        return None

    def authorized(self, request: web.Request) -> bool:
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
        if stats.first_request_at is None:
            stats.first_request_at = time.time()
        stats.attempts += 1
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            await self.gate.through()
            return await self._serve(request, anthropic)
        finally:
            stats.in_flight -= 1
            stats.last_answered_at = time.time()

    async def _serve(self, request: web.Request, anthropic: bool) -> web.StreamResponse:
        """Checks, then at most one fault, then the simulated answer, in the real APIs' order."""
        rid = f"req_{next(self._ids):012x}"
        errors = ErrorResponses(anthropic, rid, self.limiter)
        parsed = await self._parse(request, anthropic, errors)
        if isinstance(parsed, web.Response):
            return parsed
        fault = self._draw_fault()
        admitted = self._admit(request, anthropic, errors, parsed.completion, fault)
        if isinstance(admitted, web.Response):
            return admitted
        failed = await self._fail(request, errors, fault)
        if failed is not None:
            return failed
        return await self._answer(request, anthropic, errors, parsed, fault, admitted, rid)

    async def _parse(
        self, request: web.Request, anthropic: bool, errors: ErrorResponses
    ) -> wire.ParsedRequest | web.Response:
        """The request checked as the real API checks it, or the error it gets (401, 400)."""
        stats = self.stats
        if not self.authorized(request):
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
                return wire.parse_anthropic(body, request_id, version)
            return wire.parse_openai(body, request_id)
        except wire.WireError as exc:
            stats.bad_requests += 1
            return errors.bad_request(str(exc), exc.param, exc.code)

    def _admit(
        self,
        request: web.Request,
        anthropic: bool,
        errors: ErrorResponses,
        req: CompletionRequest,
        fault: str | None,
    ) -> int | web.Response:
        """The prompt's tokens once the request is within its context and rate limits,
        or the refusal (a key echoed in a 400, quota, context length, rate limit)."""
        stats = self.stats
        if fault == "echo_auth":
            stats.bad_requests += 1
            return errors.echo_auth(key_header(request, anthropic))
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
        return prompt_tokens

    async def _fail(
        self, request: web.Request, errors: ErrorResponses, fault: str | None
    ) -> web.Response | None:
        """An admitted request's fault: a dropped connection, a held request, a 5xx."""
        stats = self.stats
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
        return None

    async def _answer(
        self,
        request: web.Request,
        anthropic: bool,
        errors: ErrorResponses,
        parsed: wire.ParsedRequest,
        fault: str | None,
        prompt_tokens: int,
        rid: str,
    ) -> web.StreamResponse:
        """The simulated model's answer, streamed or whole (cut off half-way when garbled)."""
        stats = self.stats
        req = parsed.completion
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
        response: web.StreamResponse
        if parsed.stream:
            response = await self._stream(
                request,
                headers,
                delay_ms,
                anthropic,
                resp_id,
                model,
                out.text,
                out.finish_reason,
                usage,
                parsed.include_usage,
            )
        else:
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
            payload = self._body(req, out, anthropic, resp_id)
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

    def _body(self, req: CompletionRequest, out: SimOutput, anthropic: bool, resp_id: str) -> bytes:
        """The whole (not streamed) answer body of this simulated output."""
        model = f"{req.model}-{SIMULATED_LABEL}"
        usage = (out.input_tokens, out.output_tokens)
        if anthropic:
            return wire.anthropic_message(resp_id, model, out.text, out.finish_reason, usage)
        logprobs = req.top_logprobs and simulated_logprobs(
            req, req.model, out.output_tokens, req.top_logprobs
        )
        return wire.openai_completion(
            resp_id, model, out.text, out.finish_reason, usage, logprobs or None
        )

    def batch_answer(
        self, req: CompletionRequest, anthropic: bool, rid: str, fail: bool
    ) -> tuple[int, bytes]:
        """(status, body) of one batch line: the live route's context check and simulated
        answer (no rate limit or transport fault: a batch has its own limits); `fail` gives
        the live route's 500 instead."""
        errors = ErrorResponses(anthropic, rid, self.limiter)
        prompt_tokens = estimate_prompt_tokens(req.messages)
        window = self.config.context_window
        refusal = errors.server() if fail else None
        if refusal is None and window is not None and prompt_tokens + req.max_tokens > window:
            refusal = errors.context_length(prompt_tokens, req.max_tokens, window)
        if refusal is not None:
            assert isinstance(refusal.body, bytes)
            return refusal.status, refusal.body
        out = simulate(
            req, req.model, seed=self.config.seed, rates=self.rates, prompt_tokens=prompt_tokens
        )
        return 200, self._body(
            req, out, anthropic, ("msg_" if anthropic else "chatcmpl-") + rid.removeprefix("req_")
        )

    async def _stream(
        self,
        request: web.Request,
        headers: dict[str, str],
        delay_ms: float,
        anthropic: bool,
        resp_id: str,
        model: str,
        text: str,
        finish: Any,
        usage: tuple[int, int],
        include_usage: bool,
    ) -> web.StreamResponse:
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
        data["held"] = self.gate.held
        data.update(self.batches.stats.as_json())
        data["config"] = asdict(self.config)
        data["config"].pop("api_key", None)
        return web.json_response(data)

    async def gate_handler(self, request: web.Request) -> web.Response:
        """POST /_gate {"answer_below": N}: answer the requests numbered (by arrival,
        from 0 at start) below N and hold the later ones; {"answer_below": null} opens."""
        body = await request.json()
        below = body.get("answer_below") if isinstance(body, dict) else -1
        if below is not None and (type(below) is not int or below < 0):
            message = "answer_below: expected a whole number >= 0 or null"
            body = wire.openai_error(message, "invalid_request_error", None)
            return web.Response(status=400, body=body, content_type="application/json")
        await self.gate.move(below)
        return web.json_response({"answer_below": below, "arrived": self.gate.arrived})

    async def reset_handler(self, _request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    async def not_found(self, request: web.Request) -> web.Response:
        body = wire.openai_error(
            f"Invalid URL ({request.method} {request.path})", "invalid_request_error", None
        )
        return web.Response(status=404, body=body, content_type="application/json")


@web.middleware
async def _swallow_resets(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except _Reset:
        # The connection is gone; aiohttp only needs *a* response object to discard.
        return web.Response(status=500)


SERVER_KEY = web.AppKey("fakellm", FakeLLM)


def create_app(config: FakeLLMConfig, clock: Clock = SYSTEM_CLOCK) -> web.Application:
    """The aiohttp application serving the simulation with these switches; its rate
    limits refill by `clock` (a test's ManualClock holds them still)."""
    server = FakeLLM(config, clock)
    app = web.Application(middlewares=[_swallow_resets])
    app[SERVER_KEY] = server
    app.router.add_post("/v1/chat/completions", server.openai_handler)
    app.router.add_post("/v1/messages", server.anthropic_handler)
    app.router.add_get("/_stats", server.stats_handler)
    app.router.add_get("/_requests", server.requests_handler)
    app.router.add_post("/_reset", server.reset_handler)
    app.router.add_post("/_gate", server.gate_handler)
    add_batch_routes(app, server)
    add_embedding_routes(app)
    app.router.add_route("*", "/{tail:.*}", server.not_found)
    return app
