"""The response cache's records: one cached answer, and what `promptlab cache stats` says."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class CacheEntry:
    """One answer kept under the hash of the request it answered (never the request
    itself): its output as stored (masked like results), its usage and when it came."""

    cache_key: str
    endpoint: str
    model: str
    output_text: str
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    model_version: str | None
    #: How long the answer took when it was sent (a hit has no latency of its own).
    latency_ms: float | None
    token_entropy: float | None
    logprob_mean: float | None
    logprob_tokens: int | None
    #: The run whose answer it is.
    source_run_id: str | None
    created_at: datetime

    @property
    def size(self) -> int:
        """Roughly what the entry holds in memory, for the run's bounded index."""
        return len(self.output_text) + 200


@dataclass(frozen=True)
class CacheGroup:
    """The entries of one endpoint and model, and the answers they gave."""

    endpoint: str
    model: str
    entries: int
    bytes: int
    #: Results answered from the cache (every run's, as the results table holds them).
    hits: int
    oldest: datetime | None
    newest: datetime | None


@dataclass(frozen=True)
class CacheStats:
    """The whole cache, and per endpoint and model (largest first)."""

    entries: int
    bytes: int
    hits: int
    oldest: datetime | None
    newest: datetime | None
    groups: tuple[CacheGroup, ...]
