"""Retry policy: which errors to retry, fail at once, or stop the run; how long to wait."""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from promptlab.errors import ConfigError, ErrorKind, ProviderError

#: HTTP statuses that are transient even when the adapter calls them a bad request.
RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
#: Kinds worth another attempt: the next one may well succeed.
RETRY_KINDS = frozenset(
    {
        ErrorKind.RATE_LIMIT,
        ErrorKind.OVERLOADED,
        ErrorKind.TIMEOUT,
        ErrorKind.CONNECTION,
        ErrorKind.SERVER,
    }
)
#: Kinds that no item of the run can get past: stop dispatching and say why.
STOP_KINDS = frozenset({ErrorKind.QUOTA, ErrorKind.AUTH})
#: Kinds that throttle the whole endpoint (gate + AIMD), not only this request.
THROTTLE_KINDS = frozenset({ErrorKind.RATE_LIMIT, ErrorKind.OVERLOADED})


#: Longest timeout or wait a policy may set: an hour is already longer than any
#: provider holds a request; more is a typo (and huge values overflow the event loop).
MAX_WAIT_S = 3600.0


class Action(enum.StrEnum):
    """What to do after a failed attempt."""

    RETRY = "retry"
    FAIL = "fail"
    STOP_RUN = "stop_run"


@dataclass(frozen=True)
class RetryPolicy:
    """Per-run retry settings; `from_mapping` reads them from a run spec."""

    max_attempts: int = 6
    #: 429/529 answers wait at the shared gate and do not count against max_attempts;
    #: only this many of them end an item.
    max_throttled_attempts: int = 50
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    #: Longest server hint (Retry-After) we honour; beyond it we use our own backoff.
    max_retry_after_s: float = 120.0
    #: Per-request timeout, covering the whole HTTP exchange.
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.max_throttled_attempts < 1:
            raise ConfigError("retry.max_attempts and max_throttled_attempts must be at least 1")
        if self.backoff_base_s < 0 or self.backoff_cap_s < self.backoff_base_s:
            raise ConfigError("retry: need 0 <= backoff_base_s <= backoff_cap_s")
        if self.timeout_s <= 0 or self.max_retry_after_s < 0:
            raise ConfigError("retry: timeout_s must be positive, max_retry_after_s >= 0")
        for name in ("timeout_s", "backoff_cap_s", "max_retry_after_s"):
            if getattr(self, name) > MAX_WAIT_S:
                raise ConfigError(f"retry.{name}: at most {MAX_WAIT_S:g} s")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> RetryPolicy:
        """Build from a spec's `retry:` mapping; unknown keys are an error."""
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"retry: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = {}
        for name, value in data.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise ConfigError(f"retry.{name}: expected a finite number, got {value!r}")
            integer = name in ("max_attempts", "max_throttled_attempts")
            values[name] = int(value) if integer else float(value)
        return replace(cls(), **values)

    def backoff_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full-jitter exponential backoff before attempt `attempt + 1` (attempt >= 1)."""
        ceiling = min(self.backoff_cap_s, self.backoff_base_s * 2 ** max(attempt - 1, 0))
        return (rng or random).uniform(0.0, ceiling)

    def delay_s(
        self, error: ProviderError, attempt: int, rng: random.Random | None = None
    ) -> float:
        """The wait before retrying: the server's hint (capped) or our own backoff."""
        hint = error.retry_after_s
        if hint is not None and 0 <= hint <= self.max_retry_after_s:
            return hint
        return self.backoff_s(attempt, rng)


def classify(error: ProviderError) -> Action:
    """Retry transient errors, fail bad requests at once, stop the run on quota and auth."""
    if error.kind in STOP_KINDS:
        return Action.STOP_RUN
    if error.kind in RETRY_KINDS:
        # The server may say a transient-looking error is final (x-should-retry: false).
        return Action.FAIL if error.should_retry is False else Action.RETRY
    if error.status in RETRYABLE_STATUSES:
        return Action.RETRY
    return Action.FAIL
