"""The Anthropic adapter (Messages API through `anthropic.AsyncAnthropic`)."""

from __future__ import annotations

import time
from typing import Any

import anthropic

from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason
from promptlab.providers.config import EndpointConfig
from promptlab.providers.errors import kept_headers, map_anthropic_error
from promptlab.providers.http_errors import malformed_body_error
from promptlab.providers.wire import (
    ANTHROPIC_FINISH_REASONS,
    ANTHROPIC_SAMPLING,
    SAMPLING_API_VERSION,
    VERSION_HEADER,
    WireFormatError,
    anthropic_body,
    anthropic_headers,
)


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
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, self.name) from exc
        try:
            message = await raw.parse()
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, self.name) from exc
        except ValueError as exc:  # a 200 whose body is not JSON: the SDK lets it escape
            raise malformed_body_error(
                exc, raw.status_code, raw.headers, provider=self.name
            ) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        # The SDK builds its objects without checking them: content that is not a list
        # is a malformed answer (as the wire parser says), not an empty one.
        content = getattr(message, "content", None)
        if not isinstance(content, list):
            shape = WireFormatError(f"'content' is not a list: {content!r:.80}")
            raise malformed_body_error(shape, raw.status_code, raw.headers, provider=self.name)
        text = "".join(getattr(block, "text", "") for block in message.content)
        return CompletionResponse(
            text=text,
            input_tokens=message.usage.input_tokens,
            output_tokens=message.usage.output_tokens,
            finish_reason=ANTHROPIC_FINISH_REASONS.get(
                message.stop_reason or "end_turn", FinishReason.STOP
            ),
            model_version=str(message.model),
            latency_ms=latency_ms,
            headers=kept_headers(dict(raw.headers.items())),
            request_id=request.request_id,
            http_status=raw.status_code,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()


def anthropic_params(request: CompletionRequest) -> dict[str, Any]:
    """`messages.create()` keyword arguments for the body in wire.anthropic_body.

    anthropic>=1 dropped `temperature` and `top_p` from `messages.create()` (a TypeError),
    and the API version anthropic>=2 sends (2026-10-21) answers 400 to them. The API
    still honours them under version 2023-06-01 for the models that take them, so a
    request that sets one sends them in the body (`extra_body`) under that version
    (wire.anthropic_headers pins it).
    """
    params = anthropic_body(request)
    sampling = {key: params.pop(key) for key in ANTHROPIC_SAMPLING if key in params}
    if sampling:
        params["extra_body"] = sampling
    params["timeout"] = request.timeout_s
    headers = anthropic_headers(request)
    if headers:
        params["extra_headers"] = headers
    return params


__all__ = ["SAMPLING_API_VERSION", "VERSION_HEADER", "AnthropicProvider", "anthropic_params"]
