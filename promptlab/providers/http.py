"""The lean HTTP path: OpenAI-compatible and Anthropic endpoints over aiohttp and orjson.

The default transport of `kind: openai` and `kind: anthropic` endpoints (the SDK
adapters stay selectable with `transport: sdk`). It sends the bodies providers/wire.py
builds, which the SDK adapters send too, and maps every answer through the same
`http_errors.error_from_response`; tests/test_providers_adapters.py runs the whole
adapter suite against both transports.

One `aiohttp.ClientSession` per provider (that is, per endpoint and key), created on
the first request so it belongs to the engine's loop; its pool holds as many
connections as the endpoint's concurrency, with no separate per-host cap.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import aiohttp
import orjson

from promptlab.errors import ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason
from promptlab.providers.config import EndpointConfig
from promptlab.providers.http_errors import (
    anthropic_kind,
    error_from_response,
    kept_headers,
    malformed_body_error,
    transport_error,
)
from promptlab.providers.wire import (
    DEFAULT_API_VERSION,
    VERSION_HEADER,
    WireFormatError,
    anthropic_body,
    anthropic_headers,
    max_tokens_param,
    openai_body,
    openai_chosen_logprob,
    openai_token_entropy,
    parse_anthropic,
    parse_openai,
    request_id_headers,
)

#: Connections kept when the endpoint names no concurrency: the engine's default cap
#: (engine/send/limiter.py DEFAULT_CONCURRENCY), so no request waits for a connection.
DEFAULT_POOL_SIZE = 64
#: How much of a non-JSON error body goes into the message.
BODY_EXCERPT_CHARS = 300

Parsed = tuple[str, int, int, FinishReason, str]


class SecretHeaders(dict[str, str]):
    """Headers that carry the key: their repr names them and never shows a value."""

    def __repr__(self) -> str:
        return f"<headers: {', '.join(self)}>"

    __str__ = __repr__


# Not a PromptlabError: never raised to a caller, only the __cause__ of a ProviderError.
class StatusAnswer(Exception):
    """The non-2xx answer a ProviderError was mapped from: its `__cause__`, as an SDK
    exception is on the SDK path, so a traceback shows what the server said."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:BODY_EXCERPT_CHARS].decode('utf-8', 'replace')}")
        self.status = status


class HttpProvider:
    """One endpoint over aiohttp; subclasses say where to post, what, and how to read it."""

    kind: str
    supports_json_schema = True
    #: The env var the SDK reads when the endpoint has no base_url, and its fallback.
    base_url_env: ClassVar[str]
    default_base_url: ClassVar[str]
    path: ClassVar[str]

    def __init__(self, endpoint: EndpointConfig, api_key: str | None) -> None:
        self.name = endpoint.name
        self.endpoint = endpoint
        base = endpoint.base_url or os.environ.get(self.base_url_env) or self.default_base_url
        self.url = base.rstrip("/") + self.path
        self.pool_size = endpoint.concurrency or DEFAULT_POOL_SIZE
        # Never in a repr, a log line or a message: only sent.
        self._headers = SecretHeaders(
            {
                "Content-Type": "application/json",
                "Accept": "application/json",
                **self._auth_headers(api_key),
            }
        )
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, url={self.url!r})"

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def _body(self, request: CompletionRequest) -> dict[str, Any]:
        raise NotImplementedError

    def _request_headers(self, request: CompletionRequest) -> dict[str, str]:
        return request_id_headers(request)

    def _parse(self, data: Any) -> Parsed:
        raise NotImplementedError

    def _entropy(self, data: Any) -> float | None:
        """The answer's mean token entropy, where its format carries log-probabilities."""
        return None

    def _chosen_logprob(self, data: Any) -> dict[str, Any]:
        """The answer's logprob_mean and logprob_tokens, where its format carries them."""
        return {}

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.pool_size, limit_per_host=0)
            self._session = aiohttp.ClientSession(connector=connector)
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError(
                f"{self!r} is bound to the event loop it first ran on; build one per loop"
            )
        return self._session

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        """Send one request; raise ProviderError on any failure."""
        session = self._client()
        data = orjson.dumps(self._body(request))
        headers = {**self._headers, **self._request_headers(request)}
        timeout = aiohttp.ClientTimeout(total=request.timeout_s)
        started = time.perf_counter()
        try:
            async with session.post(
                self.url, data=data, headers=headers, timeout=timeout, allow_redirects=False
            ) as resp:
                raw = await resp.read()
                status, resp_headers = resp.status, resp.headers
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, self.name, self.url, request.timeout_s) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        if not 200 <= status < 300:
            answer = StatusAnswer(status, raw)
            raise self._status_error(status, resp_headers, raw) from answer
        try:
            data = orjson.loads(raw)
            text, input_tokens, output_tokens, finish, model = self._parse(data)
        except (orjson.JSONDecodeError, WireFormatError) as exc:
            raise malformed_body_error(exc, status, resp_headers, provider=self.name) from exc
        return CompletionResponse(
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            finish_reason=finish,
            model_version=model,
            latency_ms=latency_ms,
            headers=kept_headers(resp_headers),
            request_id=request.request_id,
            http_status=status,
            token_entropy=self._entropy(data) if request.top_logprobs else None,
            **self._chosen_logprob(data),
        )

    def _status_error(self, status: int, headers: Mapping[str, str], raw: bytes) -> ProviderError:
        """The ProviderError for a non-2xx answer, through the mapping the SDK path uses."""
        return status_error(
            status, headers, raw, provider=self.name, anthropic=self.kind == "anthropic"
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def read_error_body(raw: bytes) -> object:
    """An error body: its JSON when it is JSON, else its text."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace").strip()


def status_error(
    status: int,
    headers: Mapping[str, str] | None,
    raw: bytes,
    *,
    provider: str,
    anthropic: bool = False,
) -> ProviderError:
    """The ProviderError for a non-2xx answer with this raw body.

    `anthropic`: the body may carry an `error.details.error_code` that fixes the kind,
    as the anthropic SDK's exception classes do (http_errors.ANTHROPIC_KINDS).
    """
    body = read_error_body(raw)
    kind = anthropic_kind(status, body) if anthropic else None
    text = body[:BODY_EXCERPT_CHARS] if isinstance(body, str) else ""
    return error_from_response(
        status,
        headers,
        body,
        provider=provider,
        kind=kind,
        fallback_message=text or f"Error code: {status}",
    )


class OpenAIHttpProvider(HttpProvider):
    """Chat completions at the official API or any OpenAI-compatible server."""

    kind = "openai"
    base_url_env = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"
    path = "/chat/completions"

    def __init__(self, endpoint: EndpointConfig, api_key: str | None) -> None:
        super().__init__(endpoint, api_key)
        self._max_tokens_param = max_tokens_param(endpoint.base_url)

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        # Local servers (Ollama, vLLM) need no key: then no Authorization header at all.
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _body(self, request: CompletionRequest) -> dict[str, Any]:
        return openai_body(request, self._max_tokens_param)

    def _parse(self, data: Any) -> Parsed:
        return parse_openai(data)

    def _entropy(self, data: Any) -> float | None:
        return openai_token_entropy(data)

    def _chosen_logprob(self, data: Any) -> dict[str, Any]:
        mean, tokens = openai_chosen_logprob(data)
        return {"logprob_mean": mean, "logprob_tokens": tokens}


class AnthropicHttpProvider(HttpProvider):
    """The Messages API, with the sampling-parameter version rule of wire.anthropic_headers."""

    kind = "anthropic"
    base_url_env = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"
    path = "/v1/messages"

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        auth = {"x-api-key": api_key} if api_key else {}
        return {**auth, VERSION_HEADER: DEFAULT_API_VERSION}

    def _body(self, request: CompletionRequest) -> dict[str, Any]:
        return anthropic_body(request)

    def _request_headers(self, request: CompletionRequest) -> dict[str, str]:
        return anthropic_headers(request)

    def _parse(self, data: Any) -> Parsed:
        return parse_anthropic(data)
