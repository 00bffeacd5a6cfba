"""fakellm's Batch APIs through the official SDKs over real HTTP: OpenAI's files and
batches, Anthropic's Message Batches, their states driven by a manual clock (no sleeps),
their answers equal to live answers, refusals, expiry, cancelling, auth and counts."""

from __future__ import annotations

import asyncio
import functools
import json
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Final

import anthropic
import openai
import pytest
from anthropic.types.messages import MessageBatchIndividualResponse
from click.testing import CliRunner
from openai.types.chat import ChatCompletion

from promptlab.cli import main
from promptlab.engine.testing import ManualClock
from promptlab.fakellm.app import FakeLLM
from promptlab.fakellm.batches import ANSWERS_PER_TURN, Line
from promptlab.fakellm.config import FakeLLMConfig
from promptlab.fakellm.server import RunningServer
from promptlab.fakellm.wire import parse_openai
from tests.fakellm_fixtures import (
    TEST_KEY,
    ServerFactory,
    anthropic_client,
    fakellm_factory,
    openai_client,
)

__all__ = ["fakellm_factory"]  # fixture, imported for pytest

START = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
CHAT: Final = "/v1/chat/completions"


def _sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """An async test run on its own event loop (the suite has no async plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _body(i: int, **extra: Any) -> dict[str, Any]:
    question = f"Question {i}: how does a lighthouse keeper trim the wick before dusk?"
    return {
        "model": "fast",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 64,
        **extra,
    }


def _row(i: int, **body: Any) -> dict[str, Any]:
    return {"custom_id": f"item-{i}", "method": "POST", "url": CHAT, "body": _body(i, **body)}


def _jsonl(rows: list[Any]) -> bytes:
    return b"\n".join(r if isinstance(r, bytes) else json.dumps(r).encode() for r in rows) + b"\n"


async def _openai_batch(client: openai.AsyncOpenAI, rows: list[Any], **metadata: str) -> Any:
    uploaded = await client.files.create(file=("input.jsonl", _jsonl(rows)), purpose="batch")
    return await client.batches.create(
        input_file_id=uploaded.id,
        endpoint=CHAT,
        completion_window="24h",
        metadata=metadata or None,
    )


async def _lines(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    content = await client.files.content(file_id)
    return [json.loads(line) for line in content.text.splitlines()]


def _without_id(data: dict[str, Any]) -> dict[str, Any]:
    """An answer less what differs per request: its id and (OpenAI) its wall-clock stamp."""
    return {k: v for k, v in data.items() if k not in ("id", "created")}


def _message_params(i: int) -> dict[str, Any]:
    return {k: v for k, v in _body(i).items() if k != "stream"}


# --- OpenAI -----------------------------------------------------------------------------


@_sync
async def test_openai_batch_walks_its_states_on_the_clock(fakellm_factory: ServerFactory) -> None:
    clock = ManualClock(START)
    server = fakellm_factory(clock=clock, batch_delay_s=100.0)
    client = openai_client(server)
    created = await _openai_batch(client, [_row(i) for i in range(20)], run="r1")
    assert created.status == "validating" and created.metadata == {"run": "r1"}
    assert created.expires_at == created.created_at + 24 * 3600
    seen = []
    # Validating the first tenth, lines at an even pace until nine tenths, then finalizing.
    for step in (0, 10, 40, 40, 9.5, 0.5):
        clock.advance(step)
        batch = await client.batches.retrieve(created.id)
        assert batch.request_counts is not None
        seen.append((batch.status, batch.request_counts.completed, batch.output_file_id is None))
    assert seen == [
        ("validating", 0, True),
        ("in_progress", 0, True),
        ("in_progress", 10, True),
        ("finalizing", 20, True),
        ("finalizing", 20, True),
        ("completed", 20, False),
    ]
    assert (batch.in_progress_at, batch.finalizing_at, batch.completed_at) == (
        created.created_at + 10,
        created.created_at + 90,
        created.created_at + 100,
    )
    assert batch.request_counts == openai.types.BatchRequestCounts(total=20, completed=20, failed=0)
    assert batch.error_file_id is None and batch.model == "fast"
    assert batch.usage is not None and batch.usage.output_tokens > 0
    lines = await _lines(client, batch.output_file_id)
    assert sorted(line["custom_id"] for line in lines) == sorted(f"item-{i}" for i in range(20))
    assert all(line["error"] is None and line["id"].startswith("batch_req_") for line in lines)
    assert server.stats()["batch_lines_answered"] == 20
    await client.batches.retrieve(created.id)  # reading again answers nothing again
    assert server.stats()["batch_lines_answered"] == 20
    await client.close()


@_sync
async def test_openai_batch_answers_equal_live_answers(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(clock=ManualClock(START))
    client = openai_client(server)
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}
    rows = [
        _row(0),
        _row(1, temperature=1.3),
        _row(2, logprobs=True, top_logprobs=2),
        _row(3, response_format=fmt),
        _row(4, max_tokens=3),
    ]
    created = await _openai_batch(client, rows)
    batch = await client.batches.retrieve(created.id)  # no delay: done at its first read
    assert batch.status == "completed"
    lines = {line["custom_id"]: line for line in await _lines(client, batch.output_file_id)}
    for row in rows:
        response = lines[row["custom_id"]]["response"]
        assert response["status_code"] == 200
        answer = ChatCompletion.model_validate(response["body"])  # the SDK's type, strictly
        live = await client.chat.completions.create(**row["body"])
        assert _without_id(answer.model_dump()) == _without_id(live.model_dump())
    assert lines["item-4"]["response"]["body"]["choices"][0]["finish_reason"] == "length"
    await client.close()


@_sync
async def test_openai_results_come_shuffled_by_the_seed(fakellm_factory: ServerFactory) -> None:
    orders = []
    for _ in range(2):
        server = fakellm_factory(clock=ManualClock(START), seed=7)
        client = openai_client(server)
        batch = await client.batches.retrieve(
            (await _openai_batch(client, [_row(i) for i in range(30)])).id
        )
        orders.append([line["custom_id"] for line in await _lines(client, batch.output_file_id)])
        await client.close()
    assert orders[0] == orders[1]  # the same seed, the same order
    assert orders[0] != [f"item-{i}" for i in range(30)]
    assert sorted(orders[0]) == sorted(f"item-{i}" for i in range(30))


def _live_error(server: RunningServer) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{server.openai_base_url}/chat/completions",
        data=json.dumps(_body(0)).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)  # noqa: S310 - loopback
    return caught.value.code, json.loads(caught.value.read())


@_sync
async def test_interleaved_reads_answer_each_line_once() -> None:
    # Over HTTP the reads rarely interleave, so this steps the server's own store on one
    # loop: the first read yields after a turn of answers and the second runs meanwhile.
    server = FakeLLM(FakeLLMConfig(port=0), ManualClock(START))
    lines = [
        Line(f"item-{i}", parse_openai(_body(i), None).completion)
        for i in range(ANSWERS_PER_TURN * 2 + 50)
    ]
    batch = server.batches.create(lines, anthropic=False, input_file_id="file-x")
    phases = await asyncio.gather(*(server.batches.observe(batch) for _ in range(3)))
    assert {phase.status for phase in phases} == {"completed"}
    assert server.batches.stats.batch_lines_answered == len(lines)
    assert batch.output is not None and len(batch.output.splitlines()) == len(lines)


@_sync
async def test_openai_failing_lines_land_in_the_error_file(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(clock=ManualClock(START), batch_line_fail_rate=0.25)
    client = openai_client(server)
    batch = await client.batches.retrieve(
        (await _openai_batch(client, [_row(i) for i in range(8)])).id
    )
    assert batch.status == "completed"
    assert batch.request_counts == openai.types.BatchRequestCounts(total=8, completed=6, failed=2)
    errors = await _lines(client, batch.error_file_id)
    assert len(errors) == 2 and len(await _lines(client, batch.output_file_id)) == 6
    live_status, live_body = _live_error(fakellm_factory(fail_rate=1.0))
    for line in errors:
        assert line["error"] is None
        assert (line["response"]["status_code"], line["response"]["body"]) == (
            live_status,
            live_body,
        )
    assert server.stats()["batch_lines_errored"] == 2
    await client.close()


@_sync
async def test_a_line_past_the_context_window_gets_the_live_400(
    fakellm_factory: ServerFactory,
) -> None:
    server = fakellm_factory(clock=ManualClock(START), context_window=100)
    client = openai_client(server)
    rows = [_row(0), _row(1, max_tokens=500)]
    batch = await client.batches.retrieve((await _openai_batch(client, rows)).id)
    assert batch.request_counts == openai.types.BatchRequestCounts(total=2, completed=1, failed=1)
    (line,) = await _lines(client, batch.error_file_id)
    assert line["custom_id"] == "item-1" and line["response"]["status_code"] == 400
    with pytest.raises(openai.BadRequestError) as live:
        await client.chat.completions.create(**rows[1]["body"])
    # The SDK keeps the envelope's `error` as the exception's body.
    assert line["response"]["body"] == {"error": live.value.body}
    assert live.value.code == "context_length_exceeded"
    await client.close()


@_sync
async def test_openai_batch_expires_with_its_unanswered_lines(
    fakellm_factory: ServerFactory,
) -> None:
    clock = ManualClock(START)
    server = fakellm_factory(clock=clock, batch_delay_s=100.0, batch_expire_s=50.0)
    client = openai_client(server)
    created = await _openai_batch(client, [_row(i) for i in range(20)])
    clock.advance(49)
    assert (await client.batches.retrieve(created.id)).status == "in_progress"
    clock.advance(1)
    batch = await client.batches.retrieve(created.id)
    assert batch.status == "expired" and batch.expired_at == created.created_at + 50
    answered = await _lines(client, batch.output_file_id)
    expired = await _lines(client, batch.error_file_id)
    assert len(answered) == 10 and len(expired) == 10  # half of the processing time went by
    assert {line["custom_id"] for line in answered + expired} == {f"item-{i}" for i in range(20)}
    for line in expired:
        assert line["response"] is None and line["error"]["code"] == "batch_expired"
    clock.advance(1000)  # nothing changes after the end
    assert (await client.batches.retrieve(created.id)).status == "expired"
    await client.close()


@_sync
async def test_openai_cancel_stops_answering(fakellm_factory: ServerFactory) -> None:
    clock = ManualClock(START)
    server = fakellm_factory(clock=clock, batch_delay_s=100.0)
    client = openai_client(server)
    created = await _openai_batch(client, [_row(i) for i in range(20)])
    clock.advance(30)
    cancelling = await client.batches.cancel(created.id)
    assert cancelling.status == "cancelling"
    assert cancelling.cancelling_at == created.created_at + 30
    clock.advance(9)
    assert (await client.batches.retrieve(created.id)).status == "cancelling"
    clock.advance(1)  # cancelling takes the finalizing share (a tenth of the delay)
    batch = await client.batches.retrieve(created.id)
    assert batch.status == "cancelled" and batch.cancelled_at == created.created_at + 40
    assert len(await _lines(client, batch.output_file_id)) == 5  # answered before the cancel
    cancelled = await _lines(client, batch.error_file_id)
    assert len(cancelled) == 15
    assert {line["error"]["code"] for line in cancelled} == {"batch_cancelled"}
    assert server.stats()["batch_lines_answered"] == 5
    with pytest.raises(openai.BadRequestError, match="cancelled"):
        await client.batches.cancel(created.id)
    await client.close()


@_sync
async def test_openai_refuses_a_bad_input_file_naming_its_lines(
    fakellm_factory: ServerFactory,
) -> None:
    clock = ManualClock(START)
    server = fakellm_factory(clock=clock, batch_delay_s=10.0)
    client = openai_client(server)
    rows: list[Any] = [
        _row(0),
        b"{not json",
        {**_row(2), "url": "/v1/embeddings"},
        {**_row(3), "method": "GET"},
        {**_row(4), "custom_id": "item-0"},
        _row(5, temperature=3),
        _row(6, model="smart"),
    ]
    created = await _openai_batch(client, rows)
    assert created.status == "validating" and created.errors is None
    clock.advance(1)  # validation ends at a tenth of the delay
    batch = await client.batches.retrieve(created.id)
    assert batch.status == "failed" and batch.failed_at == created.created_at + 1
    assert batch.errors is not None and batch.errors.data is not None
    found = [(e.line, e.code) for e in batch.errors.data]
    assert found == [
        (2, "invalid_json_line"),
        (3, "invalid_url"),
        (4, "invalid_method"),
        (5, "duplicate_custom_id"),
        (6, "decimal_above_max_value"),
        (7, "mismatched_model"),
    ]
    assert batch.output_file_id is None and batch.error_file_id is None
    assert server.stats()["batch_lines_received"] == 0
    await client.close()


@pytest.mark.parametrize(
    ("limit", "code"),
    [
        ({"batch_max_requests": 3}, "too_many_requests"),
        ({"batch_max_bytes": 600}, "file_too_large"),
    ],
)
@_sync
async def test_openai_refuses_a_file_past_the_limits(
    fakellm_factory: ServerFactory, limit: dict[str, int], code: str
) -> None:
    server = fakellm_factory(clock=ManualClock(START), **limit)
    client = openai_client(server)
    rows = [_row(i) for i in range(4)]
    assert len(_jsonl(rows)) > 600
    batch = await client.batches.retrieve((await _openai_batch(client, rows)).id)
    assert batch.status == "failed" and batch.errors is not None and batch.errors.data
    assert [e.code for e in batch.errors.data] == [code]
    await client.close()


@_sync
async def test_openai_list_pages_newest_first_with_metadata(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(clock=ManualClock(START))
    client = openai_client(server)
    ids = [(await _openai_batch(client, [_row(i)], run=f"r{i}")).id for i in range(3)]
    listed = [batch async for batch in client.batches.list(limit=2)]  # two pages
    assert [b.id for b in listed] == ids[::-1]
    found = [b for b in listed if b.metadata == {"run": "r1"}]
    assert [b.id for b in found] == [ids[1]] and found[0].status == "completed"
    await client.close()


@_sync
async def test_openai_files_round_trip(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(clock=ManualClock(START))
    client = openai_client(server)
    data = _jsonl([_row(0)])
    uploaded = await client.files.create(file=("in.jsonl", data), purpose="batch")
    assert (uploaded.bytes, uploaded.filename, uploaded.purpose) == (len(data), "in.jsonl", "batch")
    assert (await client.files.retrieve(uploaded.id)) == uploaded
    assert (await client.files.content(uploaded.id)).content == data
    assert (await client.files.delete(uploaded.id)).deleted
    with pytest.raises(openai.NotFoundError):
        await client.files.retrieve(uploaded.id)
    with pytest.raises(openai.NotFoundError):
        await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
    await client.close()


# --- Anthropic --------------------------------------------------------------------------


def _requests(n: int) -> list[dict[str, Any]]:
    return [{"custom_id": f"item-{i}", "params": _message_params(i)} for i in range(n)]


async def _results(client: anthropic.AsyncAnthropic, batch_id: str) -> list[Any]:
    return [result async for result in await client.messages.batches.results(batch_id)]


@_sync
async def test_anthropic_batch_ends_on_the_clock_with_live_answers(
    fakellm_factory: ServerFactory,
) -> None:
    clock = ManualClock(START)
    server = fakellm_factory(clock=clock, batch_delay_s=100.0)
    client = anthropic_client(server)
    created = await client.messages.batches.create(requests=_requests(12))  # type: ignore[arg-type]
    assert created.processing_status == "in_progress" and created.request_counts.processing == 12
    clock.advance(50)
    halfway = await client.messages.batches.retrieve(created.id)
    # Counts stay `processing` until the batch ends, as the API's documentation says.
    assert (halfway.processing_status, halfway.request_counts.processing) == ("in_progress", 12)
    with pytest.raises(anthropic.AnthropicError, match="results_url"):
        await client.messages.batches.results(created.id)
    clock.advance(50)
    ended = await client.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended" and ended.ended_at == START.replace(
        minute=1, second=40
    )
    assert ended.request_counts.succeeded == 12 and ended.request_counts.processing == 0
    assert ended.results_url == f"{server.base_url}/v1/messages/batches/{created.id}/results"
    results = await _results(client, created.id)
    assert [r.custom_id for r in results] != [f"item-{i}" for i in range(12)]  # shuffled
    for result in results:
        MessageBatchIndividualResponse.model_validate(result.model_dump())
        assert result.result.type == "succeeded"
        live = await client.messages.create(**_message_params(int(result.custom_id[5:])))
        assert _without_id(result.result.message.model_dump()) == _without_id(live.model_dump())
    await client.close()


def _live_anthropic_error(server: RunningServer) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{server.anthropic_base_url}/v1/messages",
        data=json.dumps(_message_params(0)).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request)  # noqa: S310 - loopback
    return caught.value.code, json.loads(caught.value.read())


@_sync
async def test_anthropic_errored_results_carry_the_live_error(
    fakellm_factory: ServerFactory,
) -> None:
    server = fakellm_factory(clock=ManualClock(START), batch_line_fail_rate=0.25)
    client = anthropic_client(server)
    created = await client.messages.batches.create(requests=_requests(8))  # type: ignore[arg-type]
    ended = await client.messages.batches.retrieve(created.id)
    assert (ended.request_counts.succeeded, ended.request_counts.errored) == (6, 2)
    errored = [r for r in await _results(client, created.id) if r.result.type == "errored"]
    _, live = _live_anthropic_error(fakellm_factory(fail_rate=1.0))
    assert len(errored) == 2
    for result in errored:
        assert _without(result.result.error.model_dump(), "request_id") == _without(
            live, "request_id"
        )
    assert server.stats()["batch_lines_errored"] == 2
    await client.close()


def _without(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


@_sync
async def test_anthropic_canceled_and_expired_results(fakellm_factory: ServerFactory) -> None:
    clock = ManualClock(START)
    server = fakellm_factory(clock=clock, batch_delay_s=100.0, batch_expire_s=50.0)
    client = anthropic_client(server)
    expiring = await client.messages.batches.create(requests=_requests(8))  # type: ignore[arg-type]
    cancelling = await client.messages.batches.create(requests=_requests(8))  # type: ignore[arg-type]
    clock.advance(30)  # lines are answered from 10 s to 90 s: two of eight by now
    cancelled = await client.messages.batches.cancel(cancelling.id)
    assert cancelled.processing_status == "canceling"
    assert cancelled.cancel_initiated_at == START.replace(second=30)
    clock.advance(20)  # the cancel ended at 40 s; the other batch expires at 50 s
    ended = {b.id: b for b in [b async for b in client.messages.batches.list()]}
    counts = {
        batch_id: (
            b.processing_status,
            b.request_counts.succeeded,
            b.request_counts.canceled,
            b.request_counts.expired,
            b.ended_at,
        )
        for batch_id, b in ended.items()
    }
    assert counts == {
        expiring.id: ("ended", 4, 0, 4, START.replace(second=50)),
        cancelling.id: ("ended", 2, 6, 0, START.replace(second=40)),
    }
    for batch_id, kinds in (
        (expiring.id, {"succeeded": 4, "expired": 4}),
        (cancelling.id, {"succeeded": 2, "canceled": 6}),
    ):
        results = await _results(client, batch_id)
        assert Counter(r.result.type for r in results) == kinds
    assert server.stats()["batch_lines_answered"] == 6
    await client.close()


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        (
            _requests(2) + [{"custom_id": "has space", "params": _message_params(2)}],
            "requests.2.custom_id: String should match pattern",
        ),
        (
            _requests(2) + [{"custom_id": "item-0", "params": _message_params(2)}],
            "requests.2.custom_id: custom_id 'item-0' is already used by requests.0",
        ),
        (
            [*_requests(1), {"custom_id": "x", "params": {"model": "fast", "messages": []}}],
            "requests.1.params.max_tokens: Field required",
        ),
        (_requests(4), "requests: List should have at most 3 items"),
    ],
)
@_sync
async def test_anthropic_refuses_a_bad_request_naming_its_index(
    fakellm_factory: ServerFactory, requests: list[Any], message: str
) -> None:
    server = fakellm_factory(clock=ManualClock(START), batch_max_requests=3)
    client = anthropic_client(server)
    with pytest.raises(anthropic.BadRequestError, match=message.replace(".", r"\.")) as caught:
        await client.messages.batches.create(requests=requests)
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert server.stats()["batches_created"] == 0
    await client.close()


@_sync
async def test_anthropic_refuses_a_body_past_the_byte_limit(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(clock=ManualClock(START), batch_max_bytes=1000)
    client = anthropic_client(server)
    with pytest.raises(anthropic.APIStatusError) as caught:
        await client.messages.batches.create(requests=_requests(8))  # type: ignore[arg-type]
    assert caught.value.status_code == 413
    await client.close()


@_sync
async def test_anthropic_list_and_delete(fakellm_factory: ServerFactory) -> None:
    clock = ManualClock(START)
    server = fakellm_factory(clock=clock, batch_delay_s=10.0)
    client = anthropic_client(server)
    ids = [(await client.messages.batches.create(requests=_requests(2))).id for _ in range(3)]  # type: ignore[arg-type]
    assert [b.id async for b in client.messages.batches.list(limit=2)] == ids[::-1]
    with pytest.raises(anthropic.BadRequestError):  # still processing
        await client.messages.batches.delete(ids[0])
    clock.advance(10)
    assert (await client.messages.batches.delete(ids[0])).type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.batches.retrieve(ids[0])
    await client.close()


# --- both -------------------------------------------------------------------------------


@_sync
async def test_batch_routes_ask_for_the_key(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(clock=ManualClock(START), api_key=TEST_KEY)
    wrong_openai = openai.AsyncOpenAI(
        api_key="sk-wrong", base_url=server.openai_base_url, max_retries=0
    )
    wrong_anthropic = anthropic.AsyncAnthropic(
        api_key="sk-wrong", base_url=server.anthropic_base_url, max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):
        await wrong_openai.files.create(file=("in.jsonl", _jsonl([_row(0)])), purpose="batch")
    with pytest.raises(openai.AuthenticationError):
        await wrong_openai.batches.retrieve("batch_x")
    with pytest.raises(anthropic.AuthenticationError):
        await wrong_anthropic.messages.batches.create(requests=_requests(1))  # type: ignore[arg-type]
    with pytest.raises(anthropic.AuthenticationError):
        await wrong_anthropic.messages.batches.list()
    right_openai, right_anthropic = openai_client(server), anthropic_client(server)
    created = await _openai_batch(right_openai, [_row(0)])
    assert (await right_openai.batches.retrieve(created.id)).status == "completed"
    await right_anthropic.messages.batches.create(requests=_requests(1))  # type: ignore[arg-type]
    assert server.stats()["batches_created"] == 2
    for client in (wrong_openai, wrong_anthropic, right_openai, right_anthropic):
        await client.close()


@_sync
async def test_stats_and_the_batches_route_count_every_line(fakellm_factory: ServerFactory) -> None:
    server = fakellm_factory(clock=ManualClock(START))
    oa, an = openai_client(server), anthropic_client(server)
    first = await _openai_batch(oa, [_row(i) for i in range(3)])
    second = await an.messages.batches.create(requests=_requests(4))  # type: ignore[arg-type]
    stats = server.stats()
    assert (stats["batches_created"], stats["batch_lines_received"]) == (2, 7)
    assert stats["batch_lines_answered"] == 0  # nothing read yet
    assert stats["batch_custom_ids_repeated"] == 3  # item-0..2 went in both batches
    assert stats["batch_repeated_ids"] == ["item-0", "item-1", "item-2"]
    assert server.batches() == [
        {
            "id": first.id,
            "format": "openai",
            "status": "completed",
            "counts": {"total": 3, "completed": 3, "failed": 0},
        },
        {
            "id": second.id,
            "format": "anthropic",
            "status": "ended",
            "counts": {"processing": 0, "succeeded": 4, "errored": 0, "canceled": 0, "expired": 0},
        },
    ]
    assert server.stats()["batch_lines_answered"] == 7
    server.reset()
    assert server.batches() == []
    assert server.stats()["batches_created"] == 0
    with pytest.raises(openai.NotFoundError):
        await oa.batches.retrieve(first.id)
    await oa.close()
    await an.close()


def test_cli_help_lists_the_batch_flags() -> None:
    result = CliRunner().invoke(main, ["fakellm", "--help"])
    assert result.exit_code == 0
    for flag in (
        "--batch-delay-s",
        "--batch-expire-s",
        "--batch-line-fail-rate",
        "--batch-max-requests",
        "--batch-max-bytes",
    ):
        assert flag in result.output


@pytest.mark.parametrize(
    "fields",
    [
        {"batch_delay_s": -1.0},
        {"batch_expire_s": 0.0},
        {"batch_line_fail_rate": 1.5},
        {"batch_max_requests": 0},
        {"batch_max_bytes": 0},
    ],
)
def test_config_refuses_bad_batch_switches(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="batch_"):
        FakeLLMConfig(**fields)
