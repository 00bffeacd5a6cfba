"""Streamed completions: a provider's answer as text pieces while it is being written.

The live gateway (promptlab/gateway/) passes a stream on to its caller piece by piece.
The lean HTTP path (http.py) asks the endpoint to stream (`stream: true`) and reads its
server-sent events, OpenAI's `data:` chunks or Anthropic's named events; every other
provider (the simulated model, the SDK transport, workers, provider batches) answers
whole, and its answer is one piece. Either way the stream ends with the whole answer as
a CompletionResponse, its text the pieces joined.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason, Provider
from promptlab.providers.http import HttpProvider, StatusAnswer
from promptlab.providers.http_errors import kept_headers, transport_error
from promptlab.providers.wire import ANTHROPIC_FINISH_REASONS, OPENAI_FINISH_REASONS

#: Longest server-sent event line read: a bigger one is a broken stream, not a piece.
MAX_EVENT_BYTES = 1 << 20

Piece = str | CompletionResponse


async def stream_completion(provider: Provider, request: CompletionRequest) -> AsyncIterator[Piece]:
    """Text pieces as they arrive, then the whole answer; ProviderError on a failure.

    A failure before the first piece can be retried by the caller; one after it cannot
    (the caller has passed pieces on)."""
    if not isinstance(provider, HttpProvider):
        answer = await provider.complete(request)
        if answer.text:
            yield answer.text
        yield answer
        return
    async for piece in _http_stream(provider, request):
        yield piece


async def _http_stream(provider: HttpProvider, request: CompletionRequest) -> AsyncIterator[Piece]:
    session = provider._client()
    body = provider._body(request)
    body["stream"] = True
    if provider.kind == "openai":
        body["stream_options"] = {"include_usage": True}
    headers = {**provider._headers, **provider._request_headers(request)}
    headers["Accept"] = "text/event-stream"
    timeout = aiohttp.ClientTimeout(total=request.timeout_s)
    started = time.perf_counter()
    reader = _OpenAIEvents() if provider.kind == "openai" else _AnthropicEvents()
    try:
        async with session.post(
            provider.url,
            data=orjson.dumps(body),
            headers=headers,
            timeout=timeout,
            allow_redirects=False,
        ) as resp:
            if not 200 <= resp.status < 300:
                raw = await resp.read()
                answer = StatusAnswer(resp.status, raw)
                raise provider._status_error(resp.status, resp.headers, raw) from answer
            async for line in resp.content:
                if len(line) > MAX_EVENT_BYTES:
                    raise _broken(provider, "an event line past 1 MiB")
                piece = reader.line(line.strip())
                if reader.error is not None:
                    raise _broken(provider, f"an error event: {reader.error:.200}")
                if piece:
                    yield piece
            status, resp_headers = resp.status, resp.headers
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise transport_error(exc, provider.name, provider.url, request.timeout_s) from exc
    if not reader.finished:
        raise _broken(provider, "the stream ended before its last event")
    yield CompletionResponse(
        text="".join(reader.pieces),
        input_tokens=reader.input_tokens,
        output_tokens=reader.output_tokens,
        finish_reason=reader.finish,
        model_version=reader.model or request.model,
        latency_ms=(time.perf_counter() - started) * 1000,
        headers=kept_headers(resp_headers),
        request_id=request.request_id,
        http_status=status,
    )


def _broken(provider: HttpProvider, why: str) -> ProviderError:
    return ProviderError(
        ErrorKind.SERVER, f"malformed stream: {why}", provider=provider.name, status=200
    )


class _Events:
    """What a stream said so far: its pieces, usage, finish reason and model."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.input_tokens = 0
        self.output_tokens = 0
        self.finish = FinishReason.STOP
        self.model = ""
        self.finished = False
        #: The message of an error event (Anthropic sends one mid-stream when overloaded).
        self.error: str | None = None

    def line(self, line: bytes) -> str | None:
        if not line.startswith(b"data:"):
            return None  # `event:` names, comments, blank separators
        data = line[5:].strip()
        if data == b"[DONE]":
            self.finished = True
            return None
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(event, dict):
            return None
        piece = self.event(event)
        if piece:
            self.pieces.append(piece)
        return piece

    def event(self, event: dict[str, Any]) -> str | None:
        raise NotImplementedError


class _OpenAIEvents(_Events):
    def event(self, event: dict[str, Any]) -> str | None:
        self.model = str(event.get("model") or self.model)
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.input_tokens = int(usage.get("prompt_tokens") or 0)
            self.output_tokens = int(usage.get("completion_tokens") or 0)
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None
        reason = choices[0].get("finish_reason")
        if reason:
            self.finish = OPENAI_FINISH_REASONS.get(str(reason), FinishReason.STOP)
        delta = choices[0].get("delta")
        content = delta.get("content") if isinstance(delta, dict) else None
        return content if isinstance(content, str) else None


class _AnthropicEvents(_Events):
    def event(self, event: dict[str, Any]) -> str | None:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = event["message"]
            self.model = str(message.get("model") or "")
            self._usage(message.get("usage"))
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                reason = str(delta["stop_reason"])
                self.finish = ANTHROPIC_FINISH_REASONS.get(reason, FinishReason.STOP)
            self._usage(event.get("usage"))
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            error = event.get("error")
            self.error = str(error.get("message") if isinstance(error, dict) else error)
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            text = event["delta"].get("text")
            return text if isinstance(text, str) else None
        return None

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.input_tokens = int(usage.get("input_tokens") or self.input_tokens)
            self.output_tokens = int(usage.get("output_tokens") or self.output_tokens)
