"""Shared fakellm fixtures: a real server on a free loopback port, in a thread.

tests/conftest.py can import these names; until then, test modules import them
directly (`from tests.fakellm_fixtures import fakellm, fakellm_factory`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.providers.config import EndpointConfig

#: fakellm ignores keys unless started with `api_key`; the SDKs still want one.
TEST_KEY = "sk-test-fakellm"

ServerFactory = Callable[..., RunningServer]


@pytest.fixture(scope="session")
def fakellm() -> Iterator[RunningServer]:
    """One fault-free, unlimited fakellm for the whole session (reset it if you count)."""
    with serve_in_thread(FakeLLMConfig(port=0)) as server:
        yield server


@pytest.fixture
def fakellm_factory() -> Iterator[ServerFactory]:
    """Start fakellm servers with the given FakeLLMConfig fields (and the clock their
    rate limits refill by: a ManualClock holds them still); stopped after the test."""
    with contextlib.ExitStack() as stack:

        def start(clock: Clock = SYSTEM_CLOCK, **fields: Any) -> RunningServer:
            config = FakeLLMConfig(port=0, **fields)
            return stack.enter_context(serve_in_thread(config, clock))

        yield start


def openai_client(server: RunningServer, **kwargs: Any) -> openai.AsyncOpenAI:
    """The real OpenAI SDK, strict about response shapes, pointed at fakellm."""
    return openai.AsyncOpenAI(
        api_key=TEST_KEY,
        base_url=server.openai_base_url,
        max_retries=0,
        _strict_response_validation=True,
        **kwargs,
    )


def anthropic_client(server: RunningServer, **kwargs: Any) -> anthropic.AsyncAnthropic:
    """The real Anthropic SDK, strict about response shapes, pointed at fakellm."""
    return anthropic.AsyncAnthropic(
        api_key=TEST_KEY,
        base_url=server.anthropic_base_url,
        max_retries=0,
        _strict_response_validation=True,
        **kwargs,
    )


def endpoint_for(server: RunningServer, kind: str, **fields: Any) -> EndpointConfig:
    """An endpoint config (kind openai or anthropic) aimed at this fakellm."""
    base_url = server.openai_base_url if kind == "openai" else server.anthropic_base_url
    fields.setdefault("context_windows", {"*": 8_192})
    return EndpointConfig(
        name=f"fake-{kind}", kind=kind, base_url=base_url, api_key_env="FAKELLM_KEY", **fields
    )
