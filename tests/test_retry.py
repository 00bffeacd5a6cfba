"""The retry policy: every error class, backoff with full jitter, server hints, config."""

from __future__ import annotations

import random

import pytest

from promptlab.engine.send.retry import Action, RetryPolicy, classify
from promptlab.errors import ConfigError, ErrorKind, ProviderError


@pytest.mark.parametrize(
    ("kind", "status", "expected"),
    [
        (ErrorKind.TIMEOUT, None, Action.RETRY),
        (ErrorKind.CONNECTION, None, Action.RETRY),
        (ErrorKind.RATE_LIMIT, 429, Action.RETRY),
        (ErrorKind.SERVER, 500, Action.RETRY),
        (ErrorKind.SERVER, 502, Action.RETRY),
        (ErrorKind.SERVER, 503, Action.RETRY),
        (ErrorKind.OVERLOADED, 529, Action.RETRY),
        (ErrorKind.BAD_REQUEST, 408, Action.RETRY),
        (ErrorKind.BAD_REQUEST, 409, Action.RETRY),
        (ErrorKind.BAD_REQUEST, 400, Action.FAIL),
        (ErrorKind.BAD_REQUEST, 422, Action.FAIL),
        (ErrorKind.NOT_FOUND, 404, Action.FAIL),
        (ErrorKind.AUTH, 403, Action.STOP_RUN),
        (ErrorKind.AUTH, 401, Action.STOP_RUN),
        (ErrorKind.CONTEXT_LENGTH, 400, Action.FAIL),
        (ErrorKind.CONTENT_FILTER, 400, Action.FAIL),
        (ErrorKind.QUOTA, 429, Action.STOP_RUN),
    ],
)
def test_classify_every_error_class(kind: ErrorKind, status: int | None, expected: Action) -> None:
    assert classify(ProviderError(kind, "x", status=status)) is expected


def test_server_saying_do_not_retry_is_final() -> None:
    error = ProviderError(ErrorKind.SERVER, "x", status=500, should_retry=False)
    assert classify(error) is Action.FAIL


def test_backoff_is_full_jitter_under_an_exponential_cap() -> None:
    policy = RetryPolicy(backoff_base_s=0.5, backoff_cap_s=4.0)
    rng = random.Random(1)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)]:
        draws = [policy.backoff_s(attempt, rng) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in draws)
        assert max(draws) > ceiling * 0.8  # spread over the whole range, not a fixed delay
        assert min(draws) < ceiling * 0.2


def test_server_hint_is_honoured_up_to_the_cap() -> None:
    policy = RetryPolicy(max_retry_after_s=10.0, backoff_cap_s=1.0)
    hinted = ProviderError(ErrorKind.RATE_LIMIT, "x", retry_after_s=7.0)
    assert policy.delay_s(hinted, 1) == 7.0
    too_long = ProviderError(ErrorKind.RATE_LIMIT, "x", retry_after_s=3600.0)
    assert policy.delay_s(too_long, 1) <= 1.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"backoff_base_s": 5, "backoff_cap_s": 1}, "backoff"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"retries": 3}, "unknown"),
        ({"timeout_s": "fast"}, "number"),
    ],
)
def test_bad_policies_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RetryPolicy.from_mapping(data)


def test_policy_from_mapping() -> None:
    policy = RetryPolicy.from_mapping({"max_attempts": 3, "timeout_s": 5})
    assert policy.max_attempts == 3
    assert policy.timeout_s == 5.0
