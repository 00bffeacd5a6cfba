"""How an endpoint's provider batches are sized, priced and polled (`executor:
provider-batch`): the `batch:` mapping of an endpoint in the providers file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from promptlab.errors import ConfigError

#: What each provider's Batch API takes in one batch (requests, bytes of the input), as
#: documented when this was written; `batch: {max_requests, max_bytes}` lowers them.
PROVIDER_LIMITS = {
    "openai": (50_000, 200 * 1024 * 1024),
    "anthropic": (100_000, 256 * 1024 * 1024),
}
#: Both providers bill batch tokens at half the live price.
BATCH_PRICE = 0.5
#: Seconds between two looks at a batch that is not done: batches take minutes to hours.
POLL_S = 30.0
#: Seconds a run waits for more requests before it sends a batch that is not full.
LINGER_S = 0.5
_FIELDS = {"price", "max_requests", "max_bytes", "poll_s", "linger_s"}


@dataclass(frozen=True)
class BatchSettings:
    """`price` is the share of the live price a batch token costs; `max_requests` and
    `max_bytes` cap one batch below the provider's own limits (None: the provider's)."""

    price: float = BATCH_PRICE
    max_requests: int | None = None
    max_bytes: int | None = None
    poll_s: float = POLL_S
    linger_s: float = LINGER_S

    def limits(self, kind: str) -> tuple[int, int]:
        """(requests, bytes) one batch may hold at an endpoint of this kind."""
        requests, size = PROVIDER_LIMITS.get(kind, PROVIDER_LIMITS["openai"])
        return (
            min(requests, self.max_requests or requests),
            min(size, self.max_bytes or size),
        )


def batch_settings(spec: Any, where: str) -> BatchSettings:
    """An endpoint's `batch:` mapping checked, each field named where it is wrong."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: batch must be a mapping of {', '.join(sorted(_FIELDS))}")
    unknown = set(spec) - _FIELDS
    if unknown:
        raise ConfigError(f"{where}: batch: unknown field(s) {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for key in ("price", "poll_s", "linger_s"):
        if key in spec:
            value = spec[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"{where}: batch: {key} must be a number >= 0, got {value!r}")
            values[key] = float(value)
    for key in ("max_requests", "max_bytes"):
        if key in spec:
            value = spec[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{where}: batch: {key} must be a whole number >= 1, got {value!r}"
                )
            values[key] = value
    return BatchSettings(**values)
