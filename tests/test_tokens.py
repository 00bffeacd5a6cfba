"""Token estimates (offline encoding) and the context-window preflight."""

from __future__ import annotations

import pytest

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.config import EndpointConfig
from promptlab.providers.tokens import (
    OFFLINE_ENCODING,
    check_fits,
    context_window,
    count_tokens,
    estimate_prompt_tokens,
    tokenizer_name,
)

ENDPOINT = EndpointConfig(
    name="e", kind="openai", context_windows={"small": 50, "gpt-4o": 128_000, "*": 1_000}
)


def test_offline_encoding_is_used() -> None:
    assert tokenizer_name() == OFFLINE_ENCODING
    assert count_tokens("hello world") == 2  # cl100k_base: "hello", " world"


def test_prompt_estimate_counts_message_overhead() -> None:
    one = estimate_prompt_tokens([{"role": "user", "content": "hello world"}])
    # 3 priming + 3 per message + role "user" (1) + content (2)
    assert one == 9
    two = estimate_prompt_tokens(
        [{"role": "user", "content": "hello world"}, {"role": "user", "content": "hello world"}]
    )
    assert two == one + 6


@pytest.mark.parametrize(
    ("model", "window"),
    [("small", 50), ("gpt-4o-2024-08-06", 128_000), ("unknown", 1_000)],
)
def test_context_window_lookup(model: str, window: int) -> None:
    assert context_window(ENDPOINT, model) == window


def test_unknown_window_is_none() -> None:
    assert context_window(EndpointConfig(name="e", kind="openai"), "x") is None


def test_check_fits_returns_the_estimate() -> None:
    messages = [{"role": "user", "content": "hello world"}]
    assert check_fits(ENDPOINT, "small", messages, max_tokens=41) == 9


def test_check_fits_states_both_numbers() -> None:
    messages = [{"role": "user", "content": "hello world"}]
    with pytest.raises(ProviderError) as info:
        check_fits(ENDPOINT, "small", messages, max_tokens=42)
    error = info.value
    assert error.kind is ErrorKind.CONTEXT_LENGTH
    assert "9 tokens" in str(error) and "42" in str(error) and "50-token" in str(error)
