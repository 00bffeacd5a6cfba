"""The provider seam: one small async interface and the plain data it exchanges."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: Header carrying `CompletionRequest.request_id`, sent by both HTTP adapters.
REQUEST_ID_HEADER = "X-Client-Request-Id"


class FinishReason(enum.StrEnum):
    """Why generation stopped, normalized across providers."""

    STOP = "stop"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    TOOL_CALLS = "tool_calls"


@dataclass(frozen=True)
class CompletionRequest:
    """One chat completion to send; `model` is the name at the endpoint (no prefix)."""

    model: str
    messages: tuple[Mapping[str, str], ...]
    max_tokens: int = 256
    temperature: float | None = None
    top_p: float | None = None
    output_schema: Mapping[str, Any] | None = None
    seed: int | None = None
    #: The item's idempotency key; adapters send it so servers can spot duplicates.
    request_id: str | None = None
    timeout_s: float = 60.0
    #: Chat Completions fields sent as written (a request file's `metadata`, `stop`, ...);
    #: an Anthropic body takes `stop` and `user` of them (wire.anthropic_body).
    extra: Mapping[str, Any] | None = None
    #: Which attempt of the item this is (1 first) and the item's key (its run's own):
    #: what a send on Celery workers is claimed by, so one attempt is sent once
    #: (promptlab/distributed/). `request_id` is a request line's own id in a batch.
    attempt: int = 1
    item_key: str | None = None
    #: Wall-clock time (epoch seconds) after which nobody waits for the answer: a worker
    #: does not send what its owner has given up on.
    deadline: float | None = None
    #: Ask for this many most likely tokens per position with their log-probabilities
    #: (OpenAI-format endpoints; a cross-check's entropy gap). None: do not ask.
    top_logprobs: int | None = None
    #: Which draw of the same request this is: a run's repeat of a row (0 first). Only
    #: the simulated model reads it (a repeat at temperature > 0 answers differently,
    #: providers/simdraws.py); real endpoints draw afresh on every call anyway.
    sample: int | None = None
    #: The run the item belongs to: a provider batch is filled per run, so a cancelled
    #: run's batches can be cancelled at the provider (providers/batches/).
    run_id: str | None = None


@dataclass(frozen=True)
class CompletionResponse:
    """What came back: output, usage, timing and the server's rate-limit headers."""

    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    model_version: str
    latency_ms: float
    headers: Mapping[str, str] = field(default_factory=dict)
    request_id: str | None = None
    #: Mean entropy (nats) of the output's tokens over the top log-probabilities
    #: returned, when the request asked for them and the provider gave them.
    token_entropy: float | None = None
    #: The HTTP status the answer came with (200); None when no HTTP was involved (the
    #: simulated `sim:` endpoints, scripted test providers).
    http_status: int | None = None
    #: The mean log-probability of the output's chosen tokens and how many tokens it is
    #: over, when the endpoint gave them (the simulated model always does): a run's
    #: perplexity per variant (promptlab/analysis/repeats.py).
    logprob_mean: float | None = None
    logprob_tokens: int | None = None
    #: The provider batch and the line in it that answered, when the endpoint's calls go
    #: through its Batch API (`executor: provider-batch`); the item's trace names both.
    batch_id: str | None = None
    batch_line: str | None = None
    #: The Celery worker that made the call and signed its answer (`executor: celery`);
    #: the item's audit trace names it for each attempt.
    served_by: str | None = None


@runtime_checkable
class Provider(Protocol):
    """An endpoint that completes chat requests.

    `complete` raises `promptlab.errors.ProviderError` (with an `ErrorKind`) for every
    failure; adapters map SDK exceptions once and never retry themselves. The caller
    (the engine's `_prepare`) checks that the request fits the context window first.
    """

    name: str
    kind: str
    supports_json_schema: bool

    async def complete(self, request: CompletionRequest) -> CompletionResponse: ...

    async def aclose(self) -> None: ...
