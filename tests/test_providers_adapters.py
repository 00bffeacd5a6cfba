"""The OpenAI, Anthropic and sim adapters against fakellm, errors as kinds.

Every openai/anthropic test runs twice: the lean HTTP path and the SDK adapters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from typing import Any

import pytest

from promptlab.data.batchfile import BODY_EXTRAS
from promptlab.engine.send.retry import THROTTLE_KINDS, Action, classify
from promptlab.engine.testing import ManualClock
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers import (
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    Provider,
    build_provider,
)
from promptlab.providers.anthropic import AnthropicProvider
from promptlab.providers.config import EndpointConfig, builtin_endpoints
from promptlab.providers.openai import OpenAIProvider
from promptlab.providers.sim import SIMULATED_HEADER
from promptlab.providers.simulator import simulated_logprobs
from promptlab.providers.wire import mean_entropy
from tests.fakellm_fixtures import (
    ServerFactory,
    anthropic_client,
    endpoint_for,
    fakellm,
    fakellm_factory,
    openai_client,
)

__all__ = ["fakellm", "fakellm_factory"]  # fixtures, imported for pytest

KEY_ENV = {"FAKELLM_KEY": "sk-test"}
KINDS = ["openai", "anthropic"]
#: Every adapter test runs against both transports of the openai and anthropic kinds.
TRANSPORTS = ["http", "sdk"]
MESSAGES = (
    {"role": "system", "content": "You are a concise travel writer."},
    {"role": "user", "content": "Describe Lisbon in three sentences for a first-time visitor."},
)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """The lean HTTP path (providers/http.py) or the SDK adapters."""
    param: str = request.param
    return param


def _endpoint(transport: str, server: Any, kind: str, **fields: Any) -> EndpointConfig:
    return endpoint_for(server, kind, transport=transport, **fields)


def _request(**fields: Any) -> CompletionRequest:
    return CompletionRequest(**{"model": "careful", "messages": MESSAGES, **fields})


def _complete(endpoint: EndpointConfig, request: CompletionRequest) -> CompletionResponse:
    async def run() -> CompletionResponse:
        provider = build_provider(endpoint, environ=KEY_ENV)
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()

    return asyncio.run(run())


def _error(endpoint: EndpointConfig, request: CompletionRequest) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        _complete(endpoint, request)
    return info.value


@pytest.mark.parametrize("kind", KINDS)
def test_adapter_returns_one_response_shape(fakellm: Any, kind: str, transport: str) -> None:
    response = _complete(_endpoint(transport, fakellm, kind), _request(max_tokens=400))
    assert response.text
    assert response.input_tokens > 0 and response.output_tokens > 0
    assert response.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert "simulated" in response.model_version
    assert response.latency_ms > 0


@pytest.mark.parametrize("kind", KINDS)
def test_length_finish_is_normalized(fakellm: Any, kind: str, transport: str) -> None:
    response = _complete(_endpoint(transport, fakellm, kind), _request(max_tokens=3))
    assert response.finish_reason is FinishReason.LENGTH
    assert response.output_tokens <= 3


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limit_headers_are_surfaced(
    fakellm_factory: ServerFactory, kind: str, transport: str
) -> None:
    server = fakellm_factory(rpm=600, tpm=1_000_000)
    response = _complete(_endpoint(transport, server, kind), _request())
    prefix = "x-ratelimit-" if kind == "openai" else "anthropic-ratelimit-"
    assert any(name.startswith(prefix) for name in response.headers)
    assert "x-fakellm" not in response.headers  # only rate-limit and retry headers are kept


@pytest.mark.parametrize("kind", KINDS)
def test_request_id_reaches_the_server(
    fakellm_factory: ServerFactory, kind: str, transport: str
) -> None:
    server = fakellm_factory()
    endpoint = _endpoint(transport, server, kind)
    _complete(endpoint, _request(request_id="item-42"))
    _complete(endpoint, _request(request_id="item-42"))
    assert server.stats()["duplicate_ids"] == ["item-42"]


@pytest.mark.parametrize("kind", KINDS)
def test_schema_request_gets_json(fakellm: Any, kind: str, transport: str) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    response = _complete(_endpoint(transport, fakellm, kind), _request(output_schema=schema))
    assert response.text.lstrip().startswith(("{", "Here", "```"))


FAULT_KINDS = [
    # (fakellm config, kind for the openai adapter, kind for the anthropic adapter)
    # The buckets' clock stands still: the second request finds the first's spent.
    (
        {"rpm": 1, "burst_s": 1.0, "_send": 2, "clock": ManualClock()},
        ErrorKind.RATE_LIMIT,
        ErrorKind.RATE_LIMIT,
    ),
    ({"quota_rate": 1.0}, ErrorKind.QUOTA, ErrorKind.QUOTA),
    # OpenAI's overload answer is a 503: a server error, not a throttle (see below).
    ({"overloaded_rate": 1.0}, ErrorKind.SERVER, ErrorKind.OVERLOADED),
    ({"fail_rate": 1.0}, ErrorKind.SERVER, ErrorKind.SERVER),
    ({"reset_rate": 1.0}, ErrorKind.CONNECTION, ErrorKind.CONNECTION),
    ({"api_key": "other"}, ErrorKind.AUTH, ErrorKind.AUTH),
    ({"context_window": 60}, ErrorKind.CONTEXT_LENGTH, ErrorKind.CONTEXT_LENGTH),
    ({"timeout_rate": 1.0}, ErrorKind.TIMEOUT, ErrorKind.TIMEOUT),  # held 120 s
    ({"garbled_rate": 1.0}, ErrorKind.SERVER, ErrorKind.SERVER),
]


@pytest.mark.parametrize(("config", "openai_kind", "anthropic_kind"), FAULT_KINDS)
@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_maps_to_its_kind(
    fakellm_factory: ServerFactory,
    config: dict[str, Any],
    openai_kind: ErrorKind,
    anthropic_kind: ErrorKind,
    kind: str,
    transport: str,
) -> None:
    config = dict(config)  # the table is shared by both parametrized kinds
    sends = config.pop("_send", 1)
    server = fakellm_factory(**config)
    # The server's own window (not our preflight) must be what refuses the prompt.
    endpoint = _endpoint(transport, server, kind, context_windows={})
    # Only the timeout fault is waited out; every other answer gets as long as a loaded
    # machine takes (a quota 429 once timed out at 0.3 s, and 2 s is not a bound either).
    # The server holds that request for 120 s: any bound is waited out in full.
    timeout_s = 0.5 if config.get("timeout_rate") else 120.0
    request = _request(max_tokens=40, timeout_s=timeout_s)
    for _ in range(sends - 1):
        _complete(endpoint, request)
    error = _error(endpoint, request)
    assert error.kind is (openai_kind if kind == "openai" else anthropic_kind)
    assert error.provider == endpoint.name
    assert isinstance(error.__cause__, Exception)  # from the SDK exception or HTTP answer
    if error.kind is ErrorKind.RATE_LIMIT:
        assert error.status == 429
        assert error.retry_after_s is not None and error.retry_after_s > 0
        assert error.should_retry is True
        assert "retry-after-ms" in error.headers
    if error.kind is ErrorKind.QUOTA:
        assert error.should_retry is False


@pytest.mark.parametrize("kind", KINDS)
def test_adapters_send_and_leave_the_context_window_check_to_the_engine(
    fakellm_factory: ServerFactory, kind: str, transport: str
) -> None:
    # The engine checks each attempt once, before it takes a permit (engine/run.py
    # `_prepare`); a second check in the adapter would only repeat the token count.
    server = fakellm_factory()
    endpoint = _endpoint(transport, server, kind, context_windows={"careful": 100})
    _complete(endpoint, _request(max_tokens=90))
    assert server.stats()["attempts"] == 1


def test_sim_adapter_needs_no_key_and_labels_output() -> None:
    endpoint = dataclasses.replace(builtin_endpoints({})["sim"], latency_scale=0)

    async def run() -> CompletionResponse:
        provider = build_provider(endpoint, environ={})
        assert isinstance(provider, Provider)
        return await provider.complete(_request())

    first, second = asyncio.run(run()), asyncio.run(run())
    assert first.text == second.text
    assert first.headers[SIMULATED_HEADER] == "true"
    assert "simulated" in first.model_version


SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
#: A request file's chat fields sent as written (promptlab.data.batchfile.BODY_EXTRAS but
#: `response_format`, which the schema above sets).
EXTRA: dict[str, Any] = {
    "metadata": {"team": "search"},
    "user": "user-7",
    "store": False,
    "stop": ["END"],
    "frequency_penalty": 0.1,
    "presence_penalty": 0.2,
    "logit_bias": {"50256": -100},
    "logprobs": True,
    "top_logprobs": 2,
    "service_tier": "auto",
    "reasoning_effort": "low",
    "prompt_cache_key": "cache-1",
    "safety_identifier": "hash-7",
    "verbosity": "low",
}
#: A value for every CompletionRequest field, as a run spec can set them. A new field
#: fails test_the_table_covers_every_request_field until it is added here (and sent).
EVERY_FIELD: dict[str, Any] = {
    "model": "careful",
    "messages": MESSAGES,
    "max_tokens": 123,
    "temperature": 0.3,
    "top_p": 0.9,
    "output_schema": SCHEMA,
    "seed": 7,
    "request_id": "item-7",
    "timeout_s": 5.0,
    "extra": EXTRA,
    # A cross-check's entropy gap asks this many log-probabilities per token.
    "top_logprobs": 2,
    # Where a send on Celery workers is claimed and how long its owner waits: never sent.
    "attempt": 2,
    "item_key": "run-item-key",
    "deadline": 4102444800.0,
    # Which repeat of its row: only the simulated model reads it, never sent.
    "sample": 2,
    # The run a provider batch is filled for (providers/batches/): never sent.
    "run_id": "run_x",
}


def test_the_table_covers_every_request_field() -> None:
    assert set(EVERY_FIELD) == {f.name for f in dataclasses.fields(CompletionRequest)}
    assert set(EXTRA) == BODY_EXTRAS - {"response_format"}


def _last_request(server: Any) -> dict[str, Any]:
    received = server.requests()
    assert received, "fakellm received no request"
    last: dict[str, Any] = received[-1]
    return last


def test_openai_adapter_sends_every_spec_parameter(
    fakellm_factory: ServerFactory, transport: str
) -> None:
    server = fakellm_factory()
    response = _complete(_endpoint(transport, server, "openai"), CompletionRequest(**EVERY_FIELD))
    assert response.text
    sent = _last_request(server)
    body = sent["body"]
    assert "run-item-key" not in json.dumps(sent) and "attempt" not in body
    assert "sample" not in body
    assert (body["temperature"], body["top_p"], body["seed"]) == (0.3, 0.9, 7)
    # A compatible server (base_url set) gets max_tokens; the official API gets
    # max_completion_tokens (test below).
    assert body["max_tokens"] == 123 and "max_completion_tokens" not in body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": SCHEMA},
    }
    assert body["messages"] == [dict(m) for m in MESSAGES]
    assert {key: body[key] for key in EXTRA} == EXTRA
    assert sent["headers"]["x-client-request-id"] == "item-7"
    assert (body["logprobs"], body["top_logprobs"]) == (True, 2)
    assert response.token_entropy is not None and response.token_entropy > 0


@pytest.mark.parametrize("model", ["careful", "sloppy"])
def test_asked_log_probabilities_come_back_as_the_answers_mean_token_entropy(
    fakellm: Any, transport: str, model: str
) -> None:
    request = _request(model=model, max_tokens=60, top_logprobs=5)
    response = _complete(_endpoint(transport, fakellm, "openai"), request)
    # What fakellm sent, read independently: the simulator's log-probabilities.
    expected = mean_entropy(simulated_logprobs(request, model, response.output_tokens, 5))
    assert response.token_entropy == pytest.approx(expected)
    sim = _complete(builtin_endpoints()["sim"], request)  # the in-process model agrees
    assert sim.token_entropy == pytest.approx(expected)
    unasked = _complete(_endpoint(transport, fakellm, "openai"), _request(model=model))
    assert unasked.token_entropy is None and sim.text == response.text


def test_a_poorer_simulated_model_is_less_sure_of_its_tokens() -> None:
    request = _request(max_tokens=60, top_logprobs=5)
    careful = mean_entropy(simulated_logprobs(request, "careful", 60, 5))
    sloppy = mean_entropy(simulated_logprobs(request, "sloppy", 60, 5))
    assert careful is not None and sloppy is not None and sloppy > careful + 0.5
    assert mean_entropy([[0.0]]) == 0.0 and mean_entropy([]) is None
    assert mean_entropy([[math.log(0.5), math.log(0.5)]]) == pytest.approx(math.log(2))


def test_fakellm_refuses_top_logprobs_out_of_range(fakellm: Any, transport: str) -> None:
    error = _error(_endpoint(transport, fakellm, "openai"), _request(top_logprobs=21))
    assert error.kind == ErrorKind.BAD_REQUEST and "top_logprobs" in str(error)


def test_openai_adapter_sends_max_completion_tokens_to_the_official_api(
    fakellm_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    server = fakellm_factory()
    # No base_url in the endpoint = the official API; the SDK's own env var points it here.
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    endpoint = dataclasses.replace(_endpoint(transport, server, "openai"), base_url=None)
    _complete(endpoint, CompletionRequest(**EVERY_FIELD))
    body = _last_request(server)["body"]
    assert body["max_completion_tokens"] == 123 and "max_tokens" not in body


def test_anthropic_adapter_sends_every_spec_parameter(
    fakellm_factory: ServerFactory, transport: str
) -> None:
    server = fakellm_factory()
    # A TypeError from the SDK (a parameter it no longer takes) fails this test.
    response = _complete(
        _endpoint(transport, server, "anthropic"), CompletionRequest(**EVERY_FIELD)
    )
    assert response.text
    sent = _last_request(server)
    body = sent["body"]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.3, 0.9, 123)
    assert body["system"] == MESSAGES[0]["content"]
    assert body["messages"] == [{"role": "user", "content": MESSAGES[1]["content"]}]
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert "seed" not in body  # the Messages API has no seed
    assert "logprobs" not in body and "top_logprobs" not in body  # nor log-probabilities
    assert response.token_entropy is None
    # Of a chat body's fields, `stop` and `user` have an Anthropic form; a run refuses
    # the others at submit (tests/test_batch_files.py).
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "user-7"}
    assert sent["headers"]["x-client-request-id"] == "item-7"
    # Sampling parameters are only accepted under the 2023-06-01 API version.
    assert sent["headers"]["anthropic-version"] == "2023-06-01"


def test_anthropic_adapter_keeps_the_sdk_api_version_without_sampling(
    fakellm_factory: ServerFactory,
    transport: str,
) -> None:
    server = fakellm_factory()
    _complete(_endpoint(transport, server, "anthropic"), _request(max_tokens=50))
    sent = _last_request(server)
    assert not {"temperature", "top_p"} & set(sent["body"])
    # The SDK's own (newer) version, not the pinned one.
    assert sent["headers"]["anthropic-version"] > "2023-06-01"


@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_anthropic_adapter_sends_one_sampling_parameter_alone(
    fakellm_factory: ServerFactory, field: str, transport: str
) -> None:
    server = fakellm_factory()
    _complete(_endpoint(transport, server, "anthropic"), _request(**{field: 0.5}))
    body = _last_request(server)["body"]
    assert body[field] == 0.5
    assert not {"temperature", "top_p"} - {field} & set(body)


def test_a_model_refusing_both_sampling_parameters_is_a_bad_request_that_says_so(
    fakellm_factory: ServerFactory,
    transport: str,
) -> None:
    server = fakellm_factory()
    endpoint = _endpoint(transport, server, "anthropic")
    error = _error(endpoint, _request(model="claude-haiku-4-5", temperature=0.3, top_p=0.9))
    assert error.kind is ErrorKind.BAD_REQUEST and error.status == 400
    assert "cannot both be specified" in error.provider_message


@pytest.mark.parametrize("kind", KINDS)
def test_an_echoed_key_reaches_the_error_message_whole(
    fakellm_factory: ServerFactory, kind: str, transport: str
) -> None:
    # fakellm's echo switch stands in for a server that puts the caller's key in an
    # error; the message is kept whole so the code that scrubs stored errors can be
    # tested against it.
    server = fakellm_factory(echo_auth_rate=1.0)
    error = _error(_endpoint(transport, server, kind), _request())
    assert error.kind is ErrorKind.BAD_REQUEST
    assert KEY_ENV["FAKELLM_KEY"] in error.provider_message
    assert KEY_ENV["FAKELLM_KEY"] in str(error)


@pytest.mark.parametrize("kind", KINDS)
def test_a_connection_reset_is_reported_as_one(
    fakellm_factory: ServerFactory, kind: str, transport: str
) -> None:
    server = fakellm_factory(reset_rate=1.0)
    error = _error(_endpoint(transport, server, kind), _request())
    assert error.kind is ErrorKind.CONNECTION
    # Not the SDKs' "Request timed out." / "Connection error.": what aiohttp saw.
    assert error.provider_message == "connection reset by server: Server disconnected"
    assert server.stats()["resets"] == 1


def test_an_openai_503_is_retried_per_item_and_does_not_throttle_the_endpoint(
    fakellm_factory: ServerFactory,
    transport: str,
) -> None:
    # The engine closes a shared gate and cuts rate and concurrency on THROTTLE_KINDS;
    # random 503s treated that way serialised a whole run (200 items: 50 s, not 2 s).
    server = fakellm_factory(overloaded_rate=1.0)
    error = _error(_endpoint(transport, server, "openai"), _request())
    assert (error.status, error.kind, error.retry_after_s) == (503, ErrorKind.SERVER, None)
    assert "overloaded" in error.provider_message
    assert error.kind not in THROTTLE_KINDS
    assert classify(error) is Action.RETRY


@pytest.mark.parametrize("kind", KINDS)
def test_an_adapter_uses_the_client_it_is_given(fakellm: Any, kind: str) -> None:
    """The client seam: the endpoint points nowhere, the given client at fakellm."""
    nowhere = EndpointConfig(name="nowhere", kind=kind, base_url="http://127.0.0.1:9/v1")

    async def run() -> CompletionResponse:
        provider: OpenAIProvider | AnthropicProvider
        if kind == "openai":
            provider = OpenAIProvider(nowhere, "unused", client=openai_client(fakellm))
        else:
            provider = AnthropicProvider(nowhere, "unused", client=anthropic_client(fakellm))
        try:
            return await provider.complete(_request(max_tokens=32))
        finally:
            await provider.aclose()

    assert "simulated" in asyncio.run(run()).model_version


@pytest.mark.parametrize("kind", KINDS)
def test_a_malformed_body_is_a_server_error(
    fakellm_factory: ServerFactory, kind: str, transport: str
) -> None:
    # Regression: the SDK adapters let the SDKs' JSONDecodeError escape unmapped.
    server = fakellm_factory(garbled_rate=1.0)
    error = _error(_endpoint(transport, server, kind), _request())
    assert (error.kind, error.status) == (ErrorKind.SERVER, 200)
    assert error.provider_message.startswith("malformed response body (HTTP 200): ")
    assert isinstance(error.__cause__, ValueError)
    assert classify(error) is Action.RETRY


@pytest.mark.parametrize(
    "request_",
    [CompletionRequest(**EVERY_FIELD), _request(max_tokens=50), _request(top_p=0.5)],
    ids=["every-field", "plain", "one-sampling-parameter"],
)
@pytest.mark.parametrize("kind", KINDS)
def test_both_transports_send_the_same_request(
    fakellm_factory: ServerFactory, kind: str, request_: CompletionRequest
) -> None:
    server = fakellm_factory()
    sent = []
    for transport in TRANSPORTS:
        _complete(_endpoint(transport, server, kind), request_)
        sent.append(_last_request(server))
    lean, sdk = sent
    assert lean["body"] == sdk["body"]
    assert lean["headers"] == sdk["headers"]  # anthropic-version, request id, content type
