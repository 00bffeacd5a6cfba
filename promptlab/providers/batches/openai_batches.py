"""OpenAI's Batch API through the official SDK: a JSONL input file uploaded, a batch
created over it (tagged with its chunk id), polled, and its output and error files read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any, Final

import openai

from promptlab.providers.base import CompletionResponse
from promptlab.providers.batches.clients import Line, Outcome, RemoteBatch, unreached
from promptlab.providers.batches.result_lines import line_outcome
from promptlab.providers.config import EndpointConfig
from promptlab.providers.errors import map_openai_error
from promptlab.providers.http_errors import error_from_response
from promptlab.providers.openai import PLACEHOLDER_KEY
from promptlab.providers.wire import (
    WireFormatError,
    max_tokens_param,
    openai_body,
    openai_chosen_logprob,
    openai_token_entropy,
    parse_openai,
)

#: The metadata key a batch carries its chunk id under: a batch created by a submit
#: whose id was never stored is found again by it (`find`).
CHUNK_KEY = "promptlab_chunk"
CHAT_URL: Final = "/v1/chat/completions"
#: OpenAI's states, said in the shared vocabulary (clients.STATES).
_STATES = {"cancelling": "cancelling", "cancelled": "cancelled"}
#: Batches listed when looking for a lost submit's batch (the newest first).
_FIND_LIMIT = 100


class OpenAIBatches:
    """One OpenAI (or compatible) endpoint's batches."""

    def __init__(
        self, endpoint: EndpointConfig, api_key: str | None, *, client: Any = None
    ) -> None:
        self.name = endpoint.name
        self._max_tokens = max_tokens_param(endpoint.base_url)
        # max_retries=0: a create retried by the SDK after a lost answer could make a
        # second batch of the same chunk; the provider's poll loop retries reads itself.
        self._client = client or openai.AsyncOpenAI(
            api_key=api_key or PLACEHOLDER_KEY, base_url=endpoint.base_url, max_retries=0
        )

    def input_file(self, lines: Sequence[Line]) -> bytes:
        """The chunk as the JSONL file the Batch API takes."""
        rows = (
            {
                "custom_id": line.custom_id,
                "method": "POST",
                "url": CHAT_URL,
                "body": openai_body(line.request, self._max_tokens),
            }
            for line in lines
        )
        return b"".join(json.dumps(row, separators=(",", ":")).encode() + b"\n" for row in rows)

    async def submit(self, chunk_id: str, lines: Sequence[Line]) -> RemoteBatch:
        try:
            uploaded = await self._client.files.create(
                file=(f"promptlab-{chunk_id}.jsonl", self.input_file(lines), "application/jsonl"),
                purpose="batch",
            )
            batch = await self._client.batches.create(
                input_file_id=uploaded.id,
                endpoint=CHAT_URL,
                completion_window="24h",
                metadata={CHUNK_KEY: chunk_id},
            )
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc
        return self._remote(batch)

    async def retrieve(self, batch_id: str) -> RemoteBatch:
        try:
            return self._remote(await self._client.batches.retrieve(batch_id))
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc

    async def cancel(self, batch_id: str) -> None:
        try:
            await self._client.batches.cancel(batch_id)
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc

    async def find(self, chunk_id: str, lines: int, since: float) -> str | None:
        try:
            async for batch in self._client.batches.list(limit=_FIND_LIMIT):
                if (batch.metadata or {}).get(CHUNK_KEY) == chunk_id:
                    return str(batch.id)
                if batch.created_at < since - 60:  # listed newest first: none older
                    return None
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc
        return None

    async def results(self, batch: RemoteBatch) -> AsyncIterator[tuple[str, Outcome]]:
        """Each answered or failed line (output and error files), then nothing: lines
        missing from both were never reached (the provider tells them apart)."""
        try:
            found = await self._client.batches.retrieve(batch.batch_id)
            files = (("output", found.output_file_id), ("error", found.error_file_id))
            read = partial(self._line, batch)
            for kind, file_id in files:
                if not file_id:
                    continue
                content = await self._client.files.content(file_id)
                for number, raw in enumerate(content.text.splitlines(), 1):
                    where = f"line {number} of its {kind} file"
                    outcome = line_outcome(raw, where, batch.batch_id, self.name, read)
                    if outcome is not None:
                        yield outcome
        except openai.OpenAIError as exc:
            raise map_openai_error(exc, self.name) from exc

    def _line(self, batch: RemoteBatch, row: dict[str, Any]) -> tuple[str, Outcome]:
        custom_id = str(row.get("custom_id"))
        error = row.get("error")
        if error is not None and not isinstance(error, dict):
            error = {"message": str(error)}  # a bare string: still the line's error
        response = row.get("response") or {}
        if not isinstance(response, dict):
            raise WireFormatError(f"'response' is not an object: {response!r:.80}")
        if error and error.get("code") in ("batch_expired", "batch_cancelled"):
            return custom_id, unreached(batch.batch_id, batch.state, custom_id)
        status = response.get("status_code")
        body = response.get("body")
        if error and status == 200:  # an answer and an error: the error is the line's
            return custom_id, error_from_response(None, None, {"error": error}, provider=self.name)
        if error or status != 200:
            return custom_id, error_from_response(
                status, None, body if body is not None else {"error": error}, provider=self.name
            )
        return custom_id, self._answer(body)

    @staticmethod
    def _answer(body: Any) -> CompletionResponse:
        text, tokens_in, tokens_out, finish, model = parse_openai(body)
        logprob_mean, logprob_tokens = openai_chosen_logprob(body)
        return CompletionResponse(
            text=text,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            finish_reason=finish,
            model_version=model,
            latency_ms=0.0,
            http_status=200,
            token_entropy=openai_token_entropy(body),
            logprob_mean=logprob_mean,
            logprob_tokens=logprob_tokens,
        )

    def _remote(self, batch: Any) -> RemoteBatch:
        counts = batch.request_counts
        message = None
        if batch.status == "failed" and batch.errors and batch.errors.data:
            message = "; ".join(
                f"line {e.line}: {e.message}" if e.line is not None else str(e.message)
                for e in batch.errors.data[:5]
            )
        return RemoteBatch(
            batch_id=str(batch.id),
            state=_STATES.get(batch.status, batch.status),
            total=counts.total if counts else 0,
            succeeded=counts.completed if counts else 0,
            failed=counts.failed if counts else 0,
            expires_at=float(batch.expires_at) if batch.expires_at else None,
            message=message,
        )

    async def aclose(self) -> None:
        await self._client.close()
