"""The OpenAI adapter; with a `base_url` it serves any OpenAI-compatible server."""

from __future__ import annotations

import time
from typing import Any

import openai

from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason
from promptlab.providers.config import EndpointConfig
from promptlab.providers.errors import kept_headers, map_openai_error
from promptlab.providers.http_errors import malformed_body_error
from promptlab.providers.wire import (
    OPENAI_FINISH_REASONS,
    WireFormatError,
    max_tokens_param,
    openai_body,
    openai_chosen_logprob,
    openai_token_entropy,
    request_id_headers,
)

#: Local servers (Ollama, vLLM) ignore the key, but the SDK insists on having one.
PLACEHOLDER_KEY = "not-needed"


class OpenAIProvider:
    """Chat completions through `openai.AsyncOpenAI`, errors mapped to ErrorKind."""

    kind = "openai"
    supports_json_schema = True

    def __init__(
        self,
        endpoint: EndpointConfig,
        api_key: str | None,
        *,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        """`client` replaces the SDK client built from the endpoint (a seam for tests and
        custom transports); build it with `max_retries=0`, as the engine owns retries."""
        self.name = endpoint.name
        self.endpoint = endpoint
        self._max_tokens_param = max_tokens_param(endpoint.base_url)
        # max_retries=0: the engine owns retries, or they multiply. The SDK's aiohttp
        # transport (its documented choice for high concurrency) measured 1.7x the
        # requests/s of the default httpx2 one against fakellm.
        self._client = client or openai.AsyncOpenAI(
            api_key=api_key or PLACEHOLDER_KEY,
            base_url=endpoint.base_url,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(),
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, base_url={self.endpoint.base_url!r})"

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        """Send one chat completion; raise ProviderError on any failure."""
        params = self._params(request)
        started = time.perf_counter()
        try:
            raw = await self._client.chat.completions.with_raw_response.create(**params)
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc
        try:
            completion = raw.parse()
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc
        except ValueError as exc:  # a 200 whose body is not JSON: the SDK lets it escape
            raise malformed_body_error(
                exc, raw.status_code, raw.headers, provider=self.name
            ) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        # The SDK builds its objects without checking them: no choice, or one without
        # its message, is a malformed answer (as the wire parser says), not an empty one.
        choices = completion.choices
        choice = choices[0] if isinstance(choices, list) and choices else None
        if choice is None or not hasattr(getattr(choice, "message", None), "content"):
            shape = WireFormatError(f"no 'choices[0].message' in the answer: {choices!r:.80}")
            raise malformed_body_error(shape, raw.status_code, raw.headers, provider=self.name)
        usage = completion.usage
        return CompletionResponse(
            text=choice.message.content or "",
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            finish_reason=OPENAI_FINISH_REASONS.get(
                choice.finish_reason or "stop", FinishReason.STOP
            ),
            model_version=completion.model,
            latency_ms=latency_ms,
            headers=kept_headers(dict(raw.headers.items())),
            request_id=request.request_id,
            http_status=raw.status_code,
            # The SDK's typed logprobs, read through the one parser of the wire format.
            token_entropy=(
                openai_token_entropy(completion.model_dump()) if request.top_logprobs else None
            ),
            **_chosen_logprob(completion, request),
        )

    def _params(self, request: CompletionRequest) -> dict[str, Any]:
        params = openai_body(request, self._max_tokens_param)
        # A request file's fields go in the body as written, whichever of them this
        # SDK version names as arguments.
        extra = {key: params.pop(key) for key in request.extra or {} if key in params}
        if extra:
            params["extra_body"] = extra
        params["timeout"] = request.timeout_s
        headers = request_id_headers(request)
        if headers:
            params["extra_headers"] = headers
        return params

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()


def _chosen_logprob(completion: Any, request: CompletionRequest) -> dict[str, Any]:
    """The answer's logprob_mean and logprob_tokens, when log-probabilities were asked."""
    if request.top_logprobs is None:
        return {}
    mean, tokens = openai_chosen_logprob(completion.model_dump())
    return {"logprob_mean": mean, "logprob_tokens": tokens}
