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
    #: Batch APIs (fakellm/batches.py): seconds from a batch's creation until it is done,
    #: on the server's clock (validating for the first tenth, lines answered at an even
    #: pace until nine tenths, then finalizing); 0 = done at its first read.
    batch_delay_s: float = 0.0
    #: Seconds after which a batch not yet done expires: the lines answered by then keep
    #: their answers, the rest expire. None = the providers' 24 h completion window.
    batch_expire_s: float | None = None
    #: Only the first this many batches expire by `batch_expire_s`; later ones keep the
    #: 24 h window (an expiry is rare: a test sees the expired lines' new batch finish).
    batch_expire_first: int | None = None
    #: Share of a batch's lines (chosen by `seed`) answered with the live route's 500 error.
    batch_line_fail_rate: float = 0.0
    #: The first batch written (by creation) has its first this many result lines
    #: unreadable, in turn: cut short, a JSON array, `error` a string, an answer whose
    #: `choices` (Anthropic: `content`) is not a list. Later batches (its lines sent
    #: again) are whole: for tests that a bad line fails its own item alone.
    batch_bad_lines: int = 0
    #: Refuse every batch with an error that quotes the caller's key header (OpenAI: the
    #: batch fails with it in `errors.data[].message`; Anthropic: a 400 at create), for
    #: tests that check a provider's batch errors are redacted like everything stored.
    batch_echo_auth: bool = False
    #: Requests and bytes a batch may hold; None = each provider's own limit (OpenAI
    #: 50,000 requests and 200 MB, Anthropic 100,000 requests and 256 MB).
    batch_max_requests: int | None = None
    batch_max_bytes: int | None = None

    def __post_init__(self) -> None:
        rates = (
            self.fail_rate,
            self.timeout_rate,
            self.quota_rate,
            self.overloaded_rate,
            self.reset_rate,
            self.echo_auth_rate,
            self.garbled_rate,
        )
        if any(r < 0 or r > 1 for r in rates) or sum(rates) > 1 + 1e-9:
            raise ValueError("fault rates must be in [0, 1] and add up to at most 1")
        if self.burst_s <= 0:
            raise ValueError("burst_s must be positive")
        if not 0 <= self.shared_load < 1:
            raise ValueError("shared_load must be in [0, 1)")
        if self.batch_delay_s < 0 or (self.batch_expire_s is not None and self.batch_expire_s <= 0):
            raise ValueError("batch_delay_s must be >= 0 and batch_expire_s positive")
        if not 0 <= self.batch_line_fail_rate <= 1:
            raise ValueError("batch_line_fail_rate must be in [0, 1]")
        if any(n is not None and n < 1 for n in (self.batch_max_requests, self.batch_max_bytes)):
            raise ValueError("batch_max_requests and batch_max_bytes must be at least 1")
