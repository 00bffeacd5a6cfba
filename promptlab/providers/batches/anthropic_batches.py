"""Anthropic's Message Batches through the official SDK: a batch created with each
request's Messages body, its `processing_status` polled, its results streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

import anthropic

from promptlab.providers.base import CompletionResponse
from promptlab.providers.batches.clients import Line, Outcome, RemoteBatch, unreached
from promptlab.providers.batches.result_lines import line_outcome
from promptlab.providers.config import EndpointConfig
from promptlab.providers.errors import map_anthropic_error
from promptlab.providers.http_errors import error_from_response
from promptlab.providers.wire import (
    SAMPLING_API_VERSION,
    VERSION_HEADER,
    anthropic_body,
    anthropic_headers,
    parse_anthropic,
)

#: An error type in a result line, as the HTTP status a live request would have got.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
#: Batches listed when looking for a lost submit's batch (the newest first).
_FIND_LIMIT = 100


class AnthropicBatches:
    """One Anthropic endpoint's message batches."""

    def __init__(self, endpoint: EndpointConfig, api_key: str, *, client: Any = None) -> None:
        self.name = endpoint.name
        # max_retries=0: see OpenAIBatches (a create must not be sent twice).
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=endpoint.base_url, max_retries=0
        )

    async def submit(self, chunk_id: str, lines: Sequence[Line]) -> RemoteBatch:
        requests: list[Any] = [
            {"custom_id": line.custom_id, "params": anthropic_body(line.request)} for line in lines
        ]
        # One API version for the whole batch: the one that takes sampling parameters
        # when any line has them (wire.anthropic_headers says so per live request).
        sampled = any(anthropic_headers(line.request).get(VERSION_HEADER) for line in lines)
        headers = {VERSION_HEADER: SAMPLING_API_VERSION} if sampled else None
        try:
            batch = await self._client.messages.batches.create(
                requests=requests, extra_headers=headers
            )
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, self.name) from exc
        return _remote(batch)

    async def retrieve(self, batch_id: str) -> RemoteBatch:
        try:
            return _remote(await self._client.messages.batches.retrieve(batch_id))
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, self.name) from exc

    async def cancel(self, batch_id: str) -> None:
        try:
            await self._client.messages.batches.cancel(batch_id)
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, self.name) from exc

    async def find(self, chunk_id: str, lines: int, since: float) -> str | None:
        """Message batches carry no metadata: the one batch created since the chunk was
        written down, holding as many requests, is its batch (two such: none is taken,
        and the chunk is sent again rather than guessed)."""
        matches = []
        try:
            async for batch in self._client.messages.batches.list(limit=_FIND_LIMIT):
                if batch.created_at.timestamp() < since - 60:
                    break
                counts = batch.request_counts
                total = (
                    counts.processing
                    + counts.succeeded
                    + counts.errored
                    + counts.canceled
                    + counts.expired
                )
                if total == lines:
                    matches.append(str(batch.id))
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, self.name) from exc
        return matches[0] if len(matches) == 1 else None

    async def results(self, batch: RemoteBatch) -> AsyncIterator[tuple[str, Outcome]]:
        """Each line of the results, read here one at a time (the SDK's own decoder
        stops at the first line that is not JSON, losing every line after it)."""
        try:
            decoder = await self._client.messages.batches.results(batch.batch_id)
            read, number = partial(self._outcome, batch), 0
            try:
                async for raw in decoder.http_response.aiter_lines():
                    number += 1
                    where = f"line {number} of its results"
                    outcome = line_outcome(raw, where, batch.batch_id, self.name, read)
                    if outcome is not None:
                        yield outcome
            finally:
                await decoder.close()
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, self.name) from exc

    def _outcome(self, batch: RemoteBatch, row: dict[str, Any]) -> tuple[str, Outcome]:
        custom_id = str(row.get("custom_id"))
        result = row["result"]
        kind = result["type"]
        if kind == "succeeded":
            text, tokens_in, tokens_out, finish, model = parse_anthropic(result["message"])
            return custom_id, CompletionResponse(
                text=text,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                finish_reason=finish,
                model_version=model,
                latency_ms=0.0,
                http_status=200,
            )
        if kind == "errored":
            body = result.get("error")
            if not isinstance(body, dict):  # a bare string: still the line's error
                body = {"error": {"type": "api_error", "message": str(body)}}
            error_type = str((body.get("error") or {}).get("type") or "api_error")
            status = _ERROR_STATUS.get(error_type, 500)
            return custom_id, error_from_response(status, None, body, provider=self.name)
        if kind not in ("canceled", "expired"):
            raise ValueError(f"result type {kind!r} is none of Anthropic's")
        state = "cancelled" if kind == "canceled" else "expired"
        return custom_id, unreached(batch.batch_id, state, custom_id)

    async def aclose(self) -> None:
        await self._client.close()


def _remote(batch: Any) -> RemoteBatch:
    counts = batch.request_counts
    total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
    if batch.processing_status == "in_progress":
        state = "in_progress"
    elif batch.processing_status == "canceling":
        state = "cancelling"
    elif counts.canceled:
        state = "cancelled"
    elif counts.expired:
        state = "expired"
    else:
        state = "completed"
    return RemoteBatch(
        batch_id=str(batch.id),
        state=state,
        total=total,
        succeeded=counts.succeeded,
        failed=counts.errored,
        expires_at=batch.expires_at.timestamp() if batch.expires_at else None,
    )
