"""fakellm's switches: address, rate limits, latency, fault rates, checks."""

from __future__ import annotations

from dataclasses import dataclass

#: How many received requests `/_requests` keeps: enough for a test, bounded under load.
RECENT_REQUESTS = 100


@dataclass(frozen=True)
class FakeLLMConfig:
    """Every fakellm switch; rates are shares of attempts in [0, 1]."""

    host: str = "127.0.0.1"
    port: int = 8011
    rpm: int | None = None
    tpm: int | None = None
    burst_s: float = 10.0
    #: Share of the limits another client on the same key takes (0 = this caller alone).
    shared_load: float = 0.0
    latency_ms: float = 0.0
    #: Wait the simulated (lognormal + per-token) latency instead of `latency_ms`.
    sim_latency: bool = False
    latency_scale: float = 1.0
    fail_rate: float = 0.0
    timeout_rate: float = 0.0
    #: A timeout fault holds the request this long: longer than any client timeout.
    timeout_hold_s: float = 120.0
    malformed_rate: float | None = None
    quota_rate: float = 0.0
    overloaded_rate: float = 0.0
    reset_rate: float = 0.0
    #: Share of 400s whose message echoes the caller's key header verbatim (for tests
    #: that check keys are scrubbed from stored errors).
    echo_auth_rate: float = 0.0
    #: Share of answers sent as a 200 whose JSON body is cut off half-way (a proxy or
    #: server bug), for tests that check a malformed body is a server error.
    garbled_rate: float = 0.0
    seed: int = 0
    #: How many received request bodies `/_requests` keeps (a test may want a whole run).
    record_requests: int = RECENT_REQUESTS
    #: When set, requests must carry this key (`Authorization: Bearer` / `x-api-key`).
    api_key: str | None = None
    #: When set, prompt + max_tokens beyond it is rejected with a context-length 400.
    context_window: int | None = None

    def __post_init__(self) -> None:
        rates = (
            self.fail_rate, self.timeout_rate, self.quota_rate, self.overloaded_rate,
            self.reset_rate, self.echo_auth_rate, self.garbled_rate,
        )  # fmt: skip
        if any(r < 0 or r > 1 for r in rates) or sum(rates) > 1 + 1e-9:
            raise ValueError("fault rates must be in [0, 1] and add up to at most 1")
        if self.burst_s <= 0:
            raise ValueError("burst_s must be positive")
        if not 0 <= self.shared_load < 1:
            raise ValueError("shared_load must be in [0, 1)")
