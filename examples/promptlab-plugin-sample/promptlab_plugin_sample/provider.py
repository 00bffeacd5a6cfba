"""The sample's provider: `kind: sample`, a wire format of its own (not OpenAI's).

    POST {base_url}/generate
    {"model": "tiny", "prompt": "user: Hello", "max_new_tokens": 64, "temperature": 0.2}
    -> 200 {"text": "...", "tokens_in": 3, "tokens_out": 5, "stop": "end" | "length"}

A 429 (with Retry-After), 401, 404, 5xx or a dropped connection is raised as promptlab's
ProviderError of its kind, so the engine's limiter, retries and error classes treat it as
they treat any provider's. The key is the one promptlab read from the env var the
providers file names; it goes out as a bearer token and nowhere else.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse, FinishReason
from promptlab.providers.config import EndpointConfig

KIND = "sample"
#: Statuses and what they mean to the engine (the rest of 4xx: a bad request).
ERRORS = {
    401: ErrorKind.AUTH,
    403: ErrorKind.AUTH,
    404: ErrorKind.NOT_FOUND,
    429: ErrorKind.RATE_LIMIT,
}


class SampleProvider:
    """An adapter for the sample wire format (promptlab's Provider protocol)."""

    kind = KIND
    supports_json_schema = False

    def __init__(self, endpoint: EndpointConfig, api_key: str | None) -> None:
        if not endpoint.base_url:
            raise ValueError(f"endpoint {endpoint.name!r}: kind sample needs base_url")
        self.name = endpoint.name
        self._url = endpoint.base_url.rstrip("/") + "/generate"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        body: dict[str, Any] = {
            "model": request.model,
            "prompt": "\n".join(f"{m['role']}: {m['content']}" for m in request.messages),
            "max_new_tokens": request.max_tokens,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if self._session is None:
            self._session = aiohttp.ClientSession()
        started = time.perf_counter()
        try:
            async with self._session.post(
                self._url,
                json=body,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=request.timeout_s),
            ) as resp:
                answer = await resp.json(content_type=None)
                if resp.status != 200:
                    raise self._error(resp.status, resp.headers, answer)
        except (aiohttp.ClientError, TimeoutError) as exc:
            kind = ErrorKind.TIMEOUT if isinstance(exc, TimeoutError) else ErrorKind.CONNECTION
            raise ProviderError(kind, f"{type(exc).__name__}: {exc}", provider=self.name) from exc
        return CompletionResponse(
            text=str(answer["text"]),
            input_tokens=int(answer.get("tokens_in", 0)),
            output_tokens=int(answer.get("tokens_out", 0)),
            finish_reason=FinishReason.LENGTH
            if answer.get("stop") == "length"
            else FinishReason.STOP,
            model_version=request.model,
            latency_ms=(time.perf_counter() - started) * 1000,
            request_id=request.request_id,
            http_status=200,
        )

    def _error(self, status: int, headers: Mapping[str, str], answer: Any) -> ProviderError:
        kind = ERRORS.get(status, ErrorKind.SERVER if status >= 500 else ErrorKind.BAD_REQUEST)
        said = answer.get("error") if isinstance(answer, dict) else None
        after = headers.get("Retry-After")
        return ProviderError(
            kind,
            str(said or f"HTTP {status}"),
            status=status,
            provider=self.name,
            retry_after_s=float(after) if after else None,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def build(
    endpoint: EndpointConfig, api_key: str | None, _environ: Mapping[str, str]
) -> SampleProvider:
    return SampleProvider(endpoint, api_key)
