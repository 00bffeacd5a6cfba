"""The Anthropic adapter (Messages API through `anthropic.AsyncAnthropic`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anthropic

from promptlab.providers.base import (
    REQUEST_ID_HEADER,
    CompletionRequest,
    CompletionResponse,
    FinishReason,
)
from promptlab.providers.config import EndpointConfig
from promptlab.providers.errors import kept_headers, map_anthropic_error

#: The API version header; the SDK sets it, a request may override it.
VERSION_HEADER = "anthropic-version"
#: The last API version that accepts sampling parameters (2026-10-21 answers 400).
SAMPLING_API_VERSION = "2023-06-01"

_FINISH_REASONS = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}


class AnthropicProvider:
    """Messages through `anthropic.AsyncAnthropic`, errors mapped to ErrorKind."""

    kind = "anthropic"
    supports_json_schema = True

    def __init__(
        self,
        endpoint: EndpointConfig,
        api_key: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        """`client` replaces the SDK client built from the endpoint (see OpenAIProvider)."""
        self.name = endpoint.name
        self.endpoint = endpoint
        # max_retries=0: the engine owns retries, or they multiply. aiohttp transport:
        # see OpenAIProvider.
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=endpoint.base_url,
            max_retries=0,
            http_client=anthropic.DefaultAioHttpClient(),
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, base_url={self.endpoint.base_url!r})"

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        """Send one message request; raise ProviderError on any failure."""
        params = anthropic_params(request)
        started = time.perf_counter()
        try:
            raw = await self._client.messages.with_raw_response.create(**params)
            message = await raw.parse()
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, self.name) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        text = "".join(getattr(block, "text", "") for block in message.content)
        return CompletionResponse(
            text=text,
            input_tokens=message.usage.input_tokens,
            output_tokens=message.usage.output_tokens,
            finish_reason=_FINISH_REASONS.get(message.stop_reason or "end_turn", FinishReason.STOP),
            model_version=str(message.model),
            latency_ms=latency_ms,
            headers=kept_headers(dict(raw.headers.items())),
            request_id=request.request_id,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()


def anthropic_params(request: CompletionRequest) -> dict[str, Any]:
    """Messages API parameters: system messages go to `system`, the rest stay in order.

    anthropic>=1 dropped `temperature` and `top_p` from `messages.create()` (a TypeError),
    and the API version anthropic>=2 sends (2026-10-21) answers 400 to them. The API
    still honours them under version 2023-06-01 for the models that take them, so a
    request that sets one sends them in the body (`extra_body`) under that version.
    """
    system = [str(m["content"]) for m in request.messages if m.get("role") == "system"]
    messages = [_message(m) for m in request.messages if m.get("role") != "system"]
    params: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "max_tokens": request.max_tokens,
        "timeout": request.timeout_s,
    }
    if system:
        params["system"] = "\n\n".join(system)
    sampling = {
        key: value
        for key, value in (("temperature", request.temperature), ("top_p", request.top_p))
        if value is not None
    }
    headers: dict[str, str] = {}
    if sampling:
        params["extra_body"] = sampling
        headers[VERSION_HEADER] = SAMPLING_API_VERSION
    if request.output_schema is not None:
        params["output_config"] = {
            "format": {"type": "json_schema", "schema": dict(request.output_schema)}
        }
    if request.request_id:
        headers[REQUEST_ID_HEADER] = request.request_id
    if headers:
        params["extra_headers"] = headers
    return params


def _message(message: Mapping[str, str]) -> dict[str, str]:
    return {"role": message.get("role", "user"), "content": str(message.get("content", ""))}
