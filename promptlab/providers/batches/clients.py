"""What a provider's Batch API is asked and answers, said once for both providers.

A client submits one chunk of requests as one batch, reads the batch's state, streams
its results and cancels it, through the official SDK's batch client (openai_batches.py,
anthropic_batches.py). States are said in one vocabulary (STATES) whichever provider
reported them, so progress reads the same for both.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from promptlab.audit.redact import redact
from promptlab.errors import ConfigError, ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.providers.config import EndpointConfig

#: A batch's states, in the order a batch goes through them (the last five end it).
STATES = (
    "submitting",
    "validating",
    "in_progress",
    "finalizing",
    "cancelling",
    "completed",
    "failed",
    "expired",
    "cancelled",
    "refused",
)
#: States after which nothing changes: the results, if any, can be read.
ENDED = frozenset({"completed", "failed", "expired", "cancelled", "refused"})


@dataclass(frozen=True)
class Line:
    """One request of a chunk, named in its batch by `custom_id`."""

    custom_id: str
    request: CompletionRequest


@dataclass(frozen=True)
class RemoteBatch:
    """A batch as its provider last described it."""

    batch_id: str
    state: str
    total: int
    succeeded: int = 0
    failed: int = 0
    #: Epoch seconds after which the provider stops working on it (None: not said).
    expires_at: float | None = None
    #: Why the provider refused the batch as a whole (its first errors, with their lines),
    #: redacted: a provider may quote the request's Authorization header in it.
    message: str | None = None

    def __post_init__(self) -> None:
        if self.message is not None:
            object.__setattr__(self, "message", redact(self.message))

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def counts(self) -> str:
        """`40/100 done, 2 failed`: what progress shows."""
        failed = f", {self.failed} failed" if self.failed else ""
        return f"{self.succeeded + self.failed}/{self.total} done{failed}"


#: A line's outcome: its answer, or its error (a line the batch never reached, because
#: it expired or was cancelled first, is a `timeout`: retried by the run's policy).
Outcome = CompletionResponse | ProviderError


class BatchClient(Protocol):
    """One endpoint's Batch API."""

    async def submit(self, chunk_id: str, lines: Sequence[Line]) -> RemoteBatch: ...

    async def retrieve(self, batch_id: str) -> RemoteBatch: ...

    def results(self, batch: RemoteBatch) -> AsyncIterator[tuple[str, Outcome]]: ...

    async def cancel(self, batch_id: str) -> None: ...

    async def find(self, chunk_id: str, lines: int, since: float) -> str | None:
        """The id of a batch this chunk's submit created though its id was never stored
        (the process died in between), or None when the provider holds none."""
        ...

    async def aclose(self) -> None: ...


def unreached(batch_id: str, state: str, custom_id: str) -> ProviderError:
    """A line its batch ended before answering (expired, cancelled)."""
    return ProviderError(
        ErrorKind.TIMEOUT,
        f"batch {batch_id} was {state} before line {custom_id} was answered; "
        "the run's retry policy sends it again in a new batch",
    )


def batch_client_for(
    endpoint: EndpointConfig, environ: Mapping[str, str] | None = None
) -> BatchClient:
    """The endpoint's Batch API client, its key read now from the env var it names."""
    environ = os.environ if environ is None else environ
    key = environ.get(endpoint.api_key_env, "") if endpoint.api_key_env else ""
    if endpoint.api_key_env and not key:
        raise ConfigError(
            f"endpoint {endpoint.name!r} needs an API key for its batches: set the "
            f"environment variable {endpoint.api_key_env}"
        )
    if endpoint.kind == "openai":
        from promptlab.providers.batches.openai_batches import OpenAIBatches

        return OpenAIBatches(endpoint, key or None)
    if endpoint.kind == "anthropic":
        from promptlab.providers.batches.anthropic_batches import AnthropicBatches

        # A server that needs no key still gets one: the SDK's client refuses an empty one.
        return AnthropicBatches(endpoint, key or "not-needed")
    raise ConfigError(
        f"endpoint {endpoint.name!r} ({endpoint.kind}) has no Batch API: executor "
        "provider-batch needs an openai or anthropic endpoint"
    )
