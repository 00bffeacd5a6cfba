"""The lean HTTP path's own behaviour, against fakellm: pool, timeouts, refusals, keys.

The behaviour it shares with the SDK adapters is in tests/test_providers_adapters.py,
which runs against both transports.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers import (
    CompletionRequest,
    CompletionResponse,
    EndpointConfig,
    build_provider,
)
from promptlab.providers.http import AnthropicHttpProvider, HttpProvider, OpenAIHttpProvider
from tests.fakellm_fixtures import ServerFactory, endpoint_for, fakellm, fakellm_factory

__all__ = ["fakellm", "fakellm_factory"]  # fixtures, imported for pytest

KEY = "sk-lean-secret-123"
ENV = {"FAKELLM_KEY": KEY}
KINDS = ["openai", "anthropic"]
REQUEST = CompletionRequest(model="careful", messages=({"role": "user", "content": "Hi"},))


def _provider(server: Any, kind: str, **fields: Any) -> HttpProvider:
    provider = build_provider(endpoint_for(server, kind, **fields), environ=ENV)
    assert isinstance(provider, HttpProvider)
    return provider


def _error(provider: HttpProvider, request: CompletionRequest = REQUEST) -> ProviderError:
    async def run() -> None:
        try:
            await provider.complete(request)
        finally:
            await provider.aclose()

    with pytest.raises(ProviderError) as info:
        asyncio.run(run())
    return info.value


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: nothing listens there


@pytest.mark.parametrize("kind", KINDS)
def test_the_pool_holds_as_many_connections_as_the_endpoint_concurrency(
    fakellm_factory: ServerFactory, kind: str
) -> None:
    # Three times the concurrency at once: the pool (not a per-host cap below it) is
    # what holds the rest back, so the server sees exactly `concurrency` at a time.
    server = fakellm_factory(latency_ms=100)
    provider = _provider(server, kind, concurrency=8)

    async def run() -> list[CompletionResponse]:
        try:
            return await asyncio.gather(*(provider.complete(REQUEST) for _ in range(24)))
        finally:
            await provider.aclose()

    assert len(asyncio.run(run())) == 24
    assert provider.pool_size == 8
    assert server.stats()["max_in_flight"] == 8


@pytest.mark.parametrize("kind", KINDS)
def test_the_key_is_sent_and_never_shown(fakellm_factory: ServerFactory, kind: str) -> None:
    server = fakellm_factory(api_key=KEY)  # answers 401 without the key
    provider = _provider(server, kind)

    async def run() -> CompletionResponse:
        try:
            return await provider.complete(REQUEST)
        finally:
            await provider.aclose()

    assert asyncio.run(run()).text
    assert KEY not in repr(provider)
    assert all(KEY not in repr(value) for value in vars(provider).values())
    assert all(KEY not in str(value) for value in vars(provider).values())


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_key_is_auth_and_not_echoed(fakellm_factory: ServerFactory, kind: str) -> None:
    server = fakellm_factory(api_key="the-right-one")
    error = _error(_provider(server, kind))
    assert (error.kind, error.status) == (ErrorKind.AUTH, 401)
    assert KEY not in str(error) and KEY not in repr(error.__cause__)


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_connection_says_so(kind: str) -> None:
    endpoint = endpoint_for(_NoServer(_closed_port()), kind)
    provider = build_provider(endpoint, environ=ENV)
    assert isinstance(provider, HttpProvider)
    error = _error(provider)
    assert error.kind is ErrorKind.CONNECTION and error.status is None
    assert error.provider_message.startswith("could not connect: Cannot connect to host")
    assert KEY not in str(error)


@pytest.mark.parametrize("kind", KINDS)
def test_the_request_timeout_is_the_requests_own(fakellm_factory: ServerFactory, kind: str) -> None:
    server = fakellm_factory(timeout_rate=1.0, timeout_hold_s=5.0)
    request = CompletionRequest(model="careful", messages=REQUEST.messages, timeout_s=0.2)
    error = _error(_provider(server, kind), request)
    assert error.kind is ErrorKind.TIMEOUT
    assert error.provider_message == "Request timed out: no answer within 0.2 s"
    assert isinstance(error.__cause__, TimeoutError)


def test_a_provider_belongs_to_the_loop_it_first_ran_on(fakellm: Any) -> None:
    provider = _provider(fakellm, "openai")

    async def once() -> None:
        await provider.complete(REQUEST)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(once())
        with pytest.raises(RuntimeError, match="bound to the event loop"):
            asyncio.run(once())
    finally:
        loop.run_until_complete(provider.aclose())
        loop.close()


def test_the_default_base_urls_are_the_vendors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    openai = OpenAIHttpProvider(EndpointConfig(name="o", kind="openai"), None)
    anthropic = AnthropicHttpProvider(EndpointConfig(name="a", kind="anthropic"), "k")
    assert openai.url == "https://api.openai.com/v1/chat/completions"
    assert anthropic.url == "https://api.anthropic.com/v1/messages"


class _NoServer:
    """Where endpoint_for points when nothing should answer."""

    def __init__(self, port: int) -> None:
        self.openai_base_url = f"http://127.0.0.1:{port}/v1"
        self.anthropic_base_url = f"http://127.0.0.1:{port}"
