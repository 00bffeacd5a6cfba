"""fakellm through the official SDKs over real HTTP: formats, streaming, limits, faults."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import openai
import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.engine.testing import ManualClock
from promptlab.fakellm.server import FakeLLMConfig, TokenBucket
from promptlab.fakellm.wire import chunks_of, openai_duration
from tests.fakellm_fixtures import (
    ServerFactory,
    anthropic_client,
    fakellm,
    fakellm_factory,
    openai_client,
)

__all__ = ["fakellm", "fakellm_factory"]  # fixtures, imported for pytest

ROOT = Path(__file__).resolve().parent.parent
#: Where the rate-limit tests' ManualClock starts (the buckets' clock; it stands still).
START = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
USER = [{"role": "user", "content": "Describe a lighthouse keeper's morning routine."}]
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "stars": {"type": "integer", "maximum": 5}},
    "required": ["title", "stars"],
}


async def _openai_raw(server: Any, **params: Any) -> Any:
    client = openai_client(server)
    try:
        return await client.chat.completions.with_raw_response.create(
            model=params.pop("model", "fast"), messages=USER, max_tokens=64, **params
        )
    finally:
        await client.close()


class _Parsed:
    """A raw response already parsed (the Anthropic SDK's parse() is async)."""

    def __init__(self, headers: Any, parsed: Any) -> None:
        self.headers = headers
        self._parsed = parsed

    def parse(self) -> Any:
        return self._parsed


async def _anthropic_raw(server: Any, **params: Any) -> _Parsed:
    client = anthropic_client(server)
    try:
        raw = await client.messages.with_raw_response.create(
            model=params.pop("model", "fast"), messages=USER, max_tokens=64, **params
        )
        return _Parsed(raw.headers, await raw.parse())
    finally:
        await client.close()


def test_openai_completion_parses_strictly(fakellm: Any) -> None:
    raw = asyncio.run(_openai_raw(fakellm))
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.completion_tokens > 0
    assert "simulated" in completion.model
    assert raw.headers["x-request-id"].startswith("req_")


def test_anthropic_message_parses_strictly(fakellm: Any) -> None:
    raw = asyncio.run(_anthropic_raw(fakellm, system="You are terse."))
    message = raw.parse()
    assert message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0
    assert "simulated" in message.model
    assert raw.headers["request-id"].startswith("req_")


def test_openai_stream_matches_the_plain_answer(fakellm: Any) -> None:
    async def run() -> tuple[str, str, Any]:
        client = openai_client(fakellm)
        plain = await client.chat.completions.create(model="careful", messages=USER, max_tokens=80)
        stream = await client.chat.completions.create(
            model="careful",
            messages=USER,
            max_tokens=80,
            stream=True,
            stream_options={"include_usage": True},
        )
        parts, usage = [], None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
            usage = chunk.usage or usage
        await client.close()
        return plain.choices[0].message.content or "", "".join(parts), usage

    plain, streamed, usage = asyncio.run(run())
    assert streamed == plain
    assert usage is not None and usage.completion_tokens > 0


def test_anthropic_stream_matches_the_plain_answer(fakellm: Any) -> None:
    async def run() -> tuple[str, str, int]:
        client = anthropic_client(fakellm)
        plain = await client.messages.create(model="careful", messages=USER, max_tokens=80)
        async with client.messages.stream(model="careful", messages=USER, max_tokens=80) as s:
            final = await s.get_final_message()
        await client.close()
        return plain.content[0].text, final.content[0].text, final.usage.output_tokens

    plain, streamed, output_tokens = asyncio.run(run())
    assert streamed == plain
    assert output_tokens > 0


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_schema_requests_get_json_that_fits(fakellm: Any, fmt: str) -> None:
    if fmt == "openai":
        fmt_param = {"type": "json_schema", "json_schema": {"name": "o", "schema": SCHEMA}}
        raw = asyncio.run(_openai_raw(fakellm, model="careful", response_format=fmt_param))
        text = raw.parse().choices[0].message.content
    else:
        config = {"format": {"type": "json_schema", "schema": SCHEMA}}
        raw = asyncio.run(_anthropic_raw(fakellm, model="careful", output_config=config))
        text = raw.parse().content[0].text
    jsonschema.validate(json.loads(text), SCHEMA)


def test_malformed_rate_one_breaks_every_json_answer(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(malformed_rate=1.0)
    fmt_param = {"type": "json_schema", "json_schema": {"name": "o", "schema": SCHEMA}}
    raw = asyncio.run(_openai_raw(server, model="careful", response_format=fmt_param))
    with pytest.raises(ValueError):
        json.loads(raw.parse().choices[0].message.content or "")


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_rate_limit_answers_429_with_retry_hints(fakellm_factory: ServerFactory, fmt: str) -> None:
    # 60 rpm with a 2 s burst: the bucket holds exactly 2 requests. The buckets' clock
    # stands still: a machine slow enough to take a second between requests would
    # otherwise refill one and admit the third.
    server = fakellm_factory(rpm=60, burst_s=2.0, clock=ManualClock(START))
    send = _openai_raw if fmt == "openai" else _anthropic_raw
    error_class = openai.RateLimitError if fmt == "openai" else anthropic.RateLimitError

    async def run() -> BaseException:
        await send(server)
        await send(server)
        try:
            await send(server)
        except Exception as exc:  # noqa: BLE001 - inspected below
            return exc
        raise AssertionError("third request was admitted")

    exc = asyncio.run(run())
    assert isinstance(exc, error_class)
    headers = exc.response.headers
    # An empty bucket refilling one request a second: the next fits in exactly 1 s.
    assert (headers["retry-after-ms"], headers["retry-after"]) == ("1000", "1")
    assert headers["x-should-retry"] == "true"
    if fmt == "openai":
        assert headers["x-ratelimit-limit-requests"] == "60"
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-reset-requests"] == "2s"  # to a full bucket
        assert exc.code == "rate_limit_exceeded"
    else:
        assert headers["anthropic-ratelimit-requests-limit"] == "60"
        assert headers["anthropic-ratelimit-requests-reset"] == "2026-12-02T02:00:02Z"
        assert exc.type == "rate_limit_error"
    stats = server.stats()
    assert (stats["attempts"], stats["successes"], stats["rate_limited"]) == (3, 2, 1)


def test_tpm_counts_prompt_plus_max_tokens_and_rejections_cost_nothing(
    fakellm_factory: ServerFactory,
) -> None:
    # 600 tpm, 10 s burst = 100 tokens: one request with max_tokens=64 fits, a second not
    # (nor later: the buckets' clock stands still).
    server = fakellm_factory(tpm=600, clock=ManualClock(START))

    async def run() -> list[str]:
        outcomes = []
        for _ in range(3):
            try:
                await _openai_raw(server)
                outcomes.append("ok")
            except openai.RateLimitError as exc:
                outcomes.append(exc.response.headers["x-ratelimit-limit-tokens"])
        return outcomes

    assert asyncio.run(run()) == ["ok", "600", "600"]
    assert server.stats()["tokens_admitted"] < 100


def test_token_bucket_is_continuous() -> None:
    bucket = TokenBucket(per_minute=60, burst_s=10, now=0.0)
    assert bucket.capacity == 10
    bucket.level = 0
    bucket.refill(now=2.5)
    assert bucket.level == pytest.approx(2.5)
    assert bucket.wait_s(3) == pytest.approx(0.5)
    # A cost beyond capacity waits for a full bucket, not forever.
    assert bucket.wait_s(50) == pytest.approx(7.5)


def test_buckets_start_full_and_reset_is_the_time_to_a_full_bucket() -> None:
    bucket = TokenBucket(per_minute=600, burst_s=10, now=0.0)  # 10/s, holds 100
    assert bucket.level == bucket.capacity == 100
    bucket.level = 0.0
    assert bucket.reset_s() == pytest.approx(10.0)  # to full, not to the next request
    assert bucket.wait_s(1) == pytest.approx(0.1)  # the next request: one interval


def test_a_shared_load_takes_its_share_of_every_refill() -> None:
    # Another client on the key takes 20%: this caller refills at 8/s, not 10/s,
    # while the bucket (and the limit headers) still say 600 per minute.
    bucket = TokenBucket(per_minute=600, burst_s=10, now=0.0, shared_load=0.2)
    assert bucket.capacity == 100 and bucket.limit == 600
    bucket.level = 0.0
    bucket.refill(now=1.0)
    assert bucket.level == pytest.approx(8.0)
    assert bucket.wait_s(9) == pytest.approx(0.125)


def test_a_429_says_exactly_when_the_next_request_fits(fakellm_factory: ServerFactory) -> None:
    clock = ManualClock(START)
    server = fakellm_factory(rpm=60, burst_s=1.0, clock=clock)  # holds 1, refills 1 a second

    async def run() -> Any:
        await _openai_raw(server)
        clock.advance(0.25)  # a quarter of the refill comes before the second request
        try:
            await _openai_raw(server)
        except openai.RateLimitError as exc:
            return exc.response.headers
        raise AssertionError("the second request fitted")

    headers = asyncio.run(run())
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["retry-after-ms"] == "750"  # to the millisecond, not "1"
    assert headers["retry-after"] == "1"
    assert headers["x-ratelimit-reset-requests"] == "750ms"


def test_success_responses_carry_rate_limit_headers(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(rpm=600, tpm=100_000)
    headers = asyncio.run(_anthropic_raw(server)).headers
    for name in ("requests", "tokens"):
        assert f"anthropic-ratelimit-{name}-remaining" in headers
        assert headers[f"anthropic-ratelimit-{name}-reset"].endswith("Z")
    headers = asyncio.run(_openai_raw(server)).headers
    assert headers["x-ratelimit-limit-tokens"] == "100000"
    assert headers["x-ratelimit-reset-requests"].endswith("s")


def test_the_gate_answers_the_first_n_and_holds_the_rest_in_flight(
    fakellm_factory: ServerFactory,
) -> None:
    server = fakellm_factory()
    server.gate(2)

    async def run() -> list[int]:
        sends = [asyncio.create_task(_openai_raw(server)) for _ in range(4)]
        # Two answered, the two that came later wait in flight (stats is read from this
        # thread: the server's loop is its own).
        while (server.stats()["successes"], server.stats()["held"]) != (2, 2):
            await asyncio.sleep(0.01)
        assert server.stats()["in_flight"] == 2
        await asyncio.to_thread(server.gate, None)  # opened: the held ones are answered
        answers = await asyncio.gather(*sends)
        return [a.http_response.status_code for a in answers]

    assert asyncio.run(run()) == [200] * 4
    stats = server.stats()
    assert (stats["successes"], stats["in_flight"], stats["held"]) == (4, 0, 0)
    refused = urllib.request.Request(
        f"{server.base_url}/_gate", method="POST", data=b'{"answer_below": -1}'
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(refused)  # noqa: S310 - loopback
    assert caught.value.code == 400


def test_stats_count_requests_completed_twice(fakellm: Any) -> None:
    fakellm.reset()
    asyncio.run(_openai_raw(fakellm, extra_headers={"X-Client-Request-Id": "item-1"}))
    asyncio.run(_anthropic_raw(fakellm, extra_headers={"X-Client-Request-Id": "item-1"}))
    asyncio.run(_openai_raw(fakellm, extra_headers={"X-Client-Request-Id": "item-2"}))
    stats = fakellm.stats()
    assert stats["successes"] == 3
    assert stats["completed_twice"] == 1
    assert stats["duplicate_ids"] == ["item-1"]


FAULTS = [
    # (config, openai SDK class, anthropic SDK class, status)
    ({"quota_rate": 1.0}, openai.RateLimitError, anthropic.PaymentRequiredError, (429, 402)),
    ({"overloaded_rate": 1.0}, openai.InternalServerError, anthropic.OverloadedError, (503, 529)),
    ({"fail_rate": 1.0}, openai.InternalServerError, anthropic.InternalServerError, (500, 500)),
    ({"reset_rate": 1.0}, openai.APIConnectionError, anthropic.APIConnectionError, None),
    ({"api_key": "other"}, openai.AuthenticationError, anthropic.AuthenticationError, (401, 401)),
    ({"context_window": 50}, openai.BadRequestError, anthropic.BadRequestError, (400, 400)),
]


@pytest.mark.parametrize(("config", "openai_class", "anthropic_class", "status"), FAULTS)
def test_faults_reach_the_sdks_as_their_own_exceptions(
    fakellm_factory: ServerFactory,
    config: dict[str, Any],
    openai_class: type[Exception],
    anthropic_class: type[Exception],
    status: tuple[int, int] | None,
) -> None:
    server = fakellm_factory(**config)
    with pytest.raises(openai_class) as oexc:
        asyncio.run(_openai_raw(server))
    with pytest.raises(anthropic_class) as aexc:
        asyncio.run(_anthropic_raw(server))
    if status is not None:
        assert (getattr(oexc.value, "status_code", None), aexc.value.status_code) == status


def test_timeout_fault_holds_past_the_client_timeout(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(timeout_rate=1.0, timeout_hold_s=5.0)
    with pytest.raises(openai.APITimeoutError):
        asyncio.run(_openai_raw(server, timeout=0.3))
    assert server.stats()["timeouts"] == 1


def test_unknown_path_is_a_json_404(fakellm: Any) -> None:
    client = openai.OpenAI(api_key="k", base_url=fakellm.openai_base_url, max_retries=0)
    with pytest.raises(openai.NotFoundError):  # fakellm serves no moderations
        client.moderations.create(input="y")


def test_chunks_join_back_to_the_text() -> None:
    text = "one two  three four five six seven eight nine"
    assert "".join(chunks_of(text)) == text


@pytest.mark.parametrize(
    ("seconds", "expected"), [(0.0421, "43ms"), (1.5, "1.5s"), (360.0, "6m0s")]
)
def test_openai_duration_format(seconds: float, expected: str) -> None:
    assert openai_duration(seconds) == expected


def test_config_rejects_rates_adding_past_one() -> None:
    with pytest.raises(ValueError):
        FakeLLMConfig(fail_rate=0.6, timeout_rate=0.6)


def test_cli_help_lists_every_flag() -> None:
    result = CliRunner().invoke(main, ["fakellm", "--help"])
    assert result.exit_code == 0
    for flag in (
        "--port",
        "--rpm",
        "--tpm",
        "--latency-ms",
        "--fail-rate",
        "--timeout-rate",
        "--malformed-rate",
        "--seed",
        "--insufficient-quota",
        "--overloaded-rate",
        "--reset-rate",
        "--burst-s",
        "--echo-auth-rate",
        "--shared-load",
    ):
        assert flag in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_cli_serves_in_a_subprocess() -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "fakellm", "--port", str(port), "--rpm", "600"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        stats = None
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stats", timeout=1) as r:
                    stats = json.loads(r.read())
                break
            except OSError:
                time.sleep(0.05)
        assert stats is not None, "fakellm did not come up"
        assert stats["config"]["rpm"] == 600
        client = openai.OpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
        reply = client.chat.completions.create(model="fast", messages=USER, max_tokens=16)
        assert reply.choices[0].message.content
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_paced_stream_still_joins_to_the_answer(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(latency_ms=20.0)

    async def run() -> tuple[str, str]:
        client = openai_client(server)
        plain = await client.chat.completions.create(model="fast", messages=USER, max_tokens=40)
        stream = await client.chat.completions.create(
            model="fast", messages=USER, max_tokens=40, stream=True
        )
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        await client.close()
        return plain.choices[0].message.content or "", "".join(parts)

    plain, streamed = asyncio.run(run())
    assert streamed == plain


async def _status_of(send: Any, server: Any, **params: Any) -> Any:
    """The SDK's 400 for a request fakellm refuses."""
    try:
        await send(server, **params)
    except (openai.BadRequestError, anthropic.BadRequestError) as exc:
        return exc
    raise AssertionError("fakellm accepted the request")


OPENAI_REFUSALS = [
    # (extra request parameters, words of the message, param)
    ({"temperature": 2.5}, "Expected a value <= 2", "temperature"),
    ({"temperature": -0.1}, "Expected a value >= 0", "temperature"),
    ({"top_p": 1.5}, "Expected a value <= 1", "top_p"),
    ({"extra_body": {"seed": 1.5}}, "expected an integer", "seed"),
    ({"extra_body": {"top_k": 5}}, "Unrecognized request argument supplied: top_k", None),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
        "response_format.json_schema.name",
        "response_format.json_schema.name",
    ),
]


@pytest.mark.parametrize(("params", "words", "param"), OPENAI_REFUSALS)
def test_openai_route_refuses_what_the_real_api_refuses(
    fakellm: Any, params: dict[str, Any], words: str, param: str | None
) -> None:
    exc = asyncio.run(_status_of(_openai_raw, fakellm, **params))
    assert exc.status_code == 400
    assert words in exc.message
    assert exc.param == param


ANTHROPIC_REFUSALS = [
    # (extra request parameters, extra headers, words of the message)
    ({"temperature": 1.5}, {"anthropic-version": "2023-06-01"}, "less than or equal to 1"),
    ({"top_p": -1}, {"anthropic-version": "2023-06-01"}, "greater than or equal to 0"),
    ({"seed": 1}, {"anthropic-version": "2023-06-01"}, "seed: Extra inputs are not permitted"),
    # The API version anthropic>=2 sends takes no sampling parameters at all.
    ({"temperature": 0.3}, {}, "temperature: Extra inputs are not permitted"),
    ({"top_p": 0.9}, {}, "top_p: Extra inputs are not permitted"),
    ({"temperature": 0.3}, {"anthropic-version": "2099-01-01"}, "invalid version"),
    (
        {"temperature": 0.3, "top_p": 0.9, "model": "claude-haiku-4-5"},
        {"anthropic-version": "2023-06-01"},
        "cannot both be specified",
    ),
    (
        {"temperature": 0.3, "model": "claude-opus-4-7"},
        {"anthropic-version": "2023-06-01"},
        "`temperature` is deprecated for this model",
    ),
]


@pytest.mark.parametrize(("params", "headers", "words"), ANTHROPIC_REFUSALS)
def test_anthropic_route_refuses_what_the_real_api_refuses(
    fakellm: Any, params: dict[str, Any], headers: dict[str, str], words: str
) -> None:
    model = params.pop("model", "fast")
    exc = asyncio.run(
        _status_of(_anthropic_raw, fakellm, model=model, extra_body=params, extra_headers=headers)
    )
    assert exc.status_code == 400
    assert exc.type == "invalid_request_error"
    assert words in exc.message


def test_requests_received_are_recorded_for_tests(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory()
    asyncio.run(_openai_raw(server, temperature=0.3, top_p=0.9, seed=4))
    asyncio.run(
        _anthropic_raw(
            server,
            extra_body={"temperature": 0.3, "top_p": 0.9},
            extra_headers={"anthropic-version": "2023-06-01", "X-Client-Request-Id": "i-1"},
        )
    )
    first, second = server.requests()
    assert first["route"] == "openai"
    assert (first["body"]["temperature"], first["body"]["top_p"], first["body"]["seed"]) == (
        0.3,
        0.9,
        4,
    )
    assert second["route"] == "anthropic"
    assert (second["body"]["temperature"], second["body"]["top_p"]) == (0.3, 0.9)
    assert second["headers"]["x-client-request-id"] == "i-1"
    # Keys are never recorded: /_requests is readable by anyone on loopback.
    assert "sk-test-fakellm" not in json.dumps([first, second])
    server.reset()
    assert server.requests() == []


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_echo_auth_switch_repeats_the_key_header_in_a_400(
    fakellm_factory: ServerFactory, fmt: str
) -> None:
    server = fakellm_factory(echo_auth_rate=1.0)
    send = _openai_raw if fmt == "openai" else _anthropic_raw
    exc = asyncio.run(_status_of(send, server))
    assert exc.status_code == 400
    # Both SDKs send `Authorization: Bearer <key>` (anthropic>=2 too).
    assert "invalid request from Bearer sk-test-fakellm" in exc.message
    body = exc.body if fmt == "openai" else exc.body["error"]
    assert body["type"] == "invalid_request_error"
    assert server.stats()["bad_requests"] == 1


def test_echo_auth_switch_echoes_x_api_key_on_the_anthropic_route(
    fakellm_factory: ServerFactory,
) -> None:
    server = fakellm_factory(echo_auth_rate=1.0)
    request = urllib.request.Request(
        f"{server.base_url}/v1/messages",
        data=json.dumps({"model": "fast", "max_tokens": 8, "messages": USER}).encode(),
        headers={"x-api-key": "sk-ant-echo-me", "content-type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request)  # noqa: S310 - loopback
    assert info.value.code == 400
    assert "sk-ant-echo-me" in json.loads(info.value.read())["error"]["message"]


def test_echo_auth_rate_half_echoes_some_and_answers_the_rest(
    fakellm_factory: ServerFactory,
) -> None:
    server = fakellm_factory(echo_auth_rate=0.5, seed=3)

    async def run() -> int:
        echoed = 0
        for _ in range(20):
            try:
                await _openai_raw(server)
            except openai.BadRequestError:
                echoed += 1
        return echoed

    echoed = asyncio.run(run())
    assert 0 < echoed < 20
    assert server.stats()["successes"] == 20 - echoed
