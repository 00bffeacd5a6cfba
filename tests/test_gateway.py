"""The live gateway (issue 56): an application calls `promptlab serve` with the SDK it
already uses, streamed and not, in OpenAI's and Anthropic's formats; each unit is served
its experiment variant's version over fakellm, and every call is recorded once (a
production log row, an exposure, an audit event), also across a kill -9 of the server.
The real `openai` and `anthropic` SDKs, a real uvicorn server and fakellm on loopback.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import duckdb
import httpx
import openai
import pytest
import yaml

from promptlab.config import Settings
from promptlab.experiments.assignment import assign
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.gateway.journal import journal_path
from promptlab.prompts.templates import Template
from promptlab.server.discovery import find_server
from promptlab.server.gateway_routes import Gateways
from promptlab.server.run import Serving
from promptlab.workbench import Workbench

KEY = "sk-gateway-test-0123456789abcdefghijklmnop"
#: Seconds a test waits for what it expects before it fails (never a sleep to pass).
PATIENCE_S = 120.0
EXPERIMENT = {
    "name": "greet-ab",
    "variants": [
        {"name": "kind", "prompt": "greet", "control": True, "weight": 1},
        # The same version sent to an Anthropic-format endpoint: callers of either
        # format read their own whatever answers.
        {"name": "brief", "prompt": "greet", "model": "claude:claude-test", "weight": 1},
    ],
}


def providers(tmp_path: Path, fake: RunningServer) -> Path:
    path = tmp_path / "providers.yaml"
    models = {"*": {"context_window": 8192}}
    path.write_text(
        yaml.safe_dump(
            {
                "endpoints": {
                    "remote": {
                        "kind": "openai",
                        "base_url": fake.openai_base_url,
                        "api_key_env": "GATEWAY_TEST_KEY",
                        "models": models,
                    },
                    "claude": {
                        "kind": "anthropic",
                        "base_url": fake.anthropic_base_url,
                        "api_key_env": "GATEWAY_TEST_KEY",
                        "models": models,
                    },
                }
            }
        )
    )
    return path


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_path: Path) -> Iterator[RunningServer]:
    with serve_in_thread(FakeLLMConfig(port=0)) as server:
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers(tmp_path, server)))
        monkeypatch.setenv("GATEWAY_TEST_KEY", KEY)
        yield server


def set_up(wb: Workbench) -> str:
    """The greet prompt and its experiment; a gateway token's secret."""
    template = Template.build(
        [
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "Greet {{ name }}."},
        ],
        params={"model": "remote:gpt-test", "max_tokens": 1000},
        variables={"name": {"type": "string", "maxLength": 40}},
    )
    wb.prompts.create("greet", template)
    wb.experiments.add(EXPERIMENT)
    return wb.tokens.create("shop-app", "gateway")[1]


@pytest.fixture
def serving(fake: RunningServer) -> Iterator[tuple[Serving, str]]:
    with Workbench.open(Settings.from_env()) as wb:
        token = set_up(wb)
        server = Serving(wb, port=0).start()
        try:
            yield server, token
        finally:
            server.stop()


def clients(server: Serving, token: str) -> tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic]:
    url = server.info.url
    return (
        openai.AsyncOpenAI(api_key=token, base_url=f"{url}/v1", max_retries=0),
        anthropic.AsyncAnthropic(api_key=token, base_url=url, max_retries=0),
    )


def rows(db: Path | Workbench, sql: str) -> list[tuple[Any, ...]]:
    """The rows `sql` reads: through the workbench that holds the database, or a file."""
    if isinstance(db, Workbench):
        with db.store.transaction() as tx:
            return tx.execute(sql).fetchall()
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


async def four_calls(server: Serving, token: str) -> dict[str, dict[str, Any]]:
    """One call each way: OpenAI whole and streamed, Anthropic whole and streamed."""
    chat, messages = clients(server, token)
    seen: dict[str, dict[str, Any]] = {}
    vars_ = {"variables": {"name": "Ann"}}
    turn = [{"role": "user", "content": "hello"}]
    raw = await chat.chat.completions.with_raw_response.create(
        model="experiment:greet-ab", messages=turn, user="unit-1", extra_body=vars_
    )
    seen["unit-1"] = {
        "headers": raw.headers,
        "text": raw.parse().choices[0].message.content,
    }
    async with chat.chat.completions.with_streaming_response.create(
        model="experiment:greet-ab",
        messages=turn,
        user="unit-2",
        stream=True,
        stream_options={"include_usage": True},
        extra_body=vars_,
    ) as response:
        text, usage = "", None
        async for chunk in await response.parse():
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
            usage = chunk.usage or usage
        seen["unit-2"] = {"headers": response.headers, "text": text, "usage": usage}
    raw_message = await messages.messages.with_raw_response.create(
        model="experiment:greet-ab",
        max_tokens=64,
        messages=turn,
        metadata={"user_id": "unit-3"},
        extra_body=vars_,
    )
    message = await raw_message.parse()
    seen["unit-3"] = {"headers": raw_message.headers, "text": message.content[0].text}
    async with messages.messages.stream(
        model="experiment:greet-ab",
        max_tokens=64,
        messages=turn,
        metadata={"user_id": "unit-4"},
        extra_body=vars_,
    ) as stream:
        final = await stream.get_final_message()
    seen["unit-4"] = {"text": final.content[0].text, "usage": final.usage}
    return seen


def test_both_sdks_streamed_and_not_are_served_their_variant_and_recorded_once(
    serving: tuple[Serving, str], fake: RunningServer
) -> None:
    server, token = serving
    wb = server.wb
    config = wb.experiments.get("greet-ab")
    seen = asyncio.run(four_calls(server, token))
    version = wb.prompts.resolve("greet").id
    for unit in ("unit-1", "unit-2", "unit-3"):
        headers = seen[unit]["headers"]
        assert headers["promptlab-variant"] == assign(config, unit).variant
        assert headers["promptlab-version"] == version
        assert headers["promptlab-trace"].startswith("tr_")
    assert all(s["text"] for s in seen.values())
    assert seen["unit-2"]["usage"].completion_tokens > 0
    # What reached the provider: the version's rendered messages, then the caller's.
    sent = fake.requests()
    assert len(sent) == 4
    for request in sent:
        contents = [m["content"] for m in request["body"]["messages"]]
        assert contents[-2:] == ["Greet Ann.", "hello"]
    server._app.state.gateways.get().journal.flush()
    logged = rows(
        wb,
        "SELECT unit_id, variant, prompt_version_id, source, output_tokens, finish_reason, "
        "check_status, http_status, ttft_ms IS NOT NULL FROM production_logs ORDER BY unit_id",
    )
    assert [r[0] for r in logged] == ["unit-1", "unit-2", "unit-3", "unit-4"]
    for unit, variant, version_id, source, tokens, finish, check, status, _ in logged:
        assert variant == assign(config, unit).variant
        assert (version_id, source, finish, check, status) == (
            version,
            "gateway",
            "stop",
            "no_schema",
            200,
        )
        assert tokens > 0
    # Time to first token is measured on streamed calls.
    assert [r[8] for r in logged] == [False, True, False, True]
    exposures = rows(wb, "SELECT unit_id, variant FROM exposures ORDER BY unit_id")
    assert exposures == [
        (u, assign(config, u).variant) for u in ("unit-1", "unit-2", "unit-3", "unit-4")
    ]
    assert wb.audit.verify().ok
    events = rows(
        wb,
        "SELECT count(*), count(DISTINCT trace_id) FROM audit_events WHERE kind = 'gateway.call'",
    )
    assert events == [(4, 4)]
    everything = str(rows(server.wb, "SELECT * FROM audit_events"))
    assert KEY not in everything and token not in everything


def test_bad_calls_are_refused_in_one_line_in_the_caller_s_format(
    serving: tuple[Serving, str],
) -> None:
    server, token = serving
    chat, messages = clients(server, token)
    turn = [{"role": "user", "content": "hello"}]

    async def refusals() -> list[tuple[int, str]]:
        out = []
        calls = [
            chat.chat.completions.create(model="experiment:greet-ab", messages=turn),
            chat.chat.completions.create(
                model="experiment:greet-ab",
                messages=turn,
                user="u",
                extra_body={"variables": {"name": 7}},
            ),
            chat.chat.completions.create(model="experiment:nope", messages=turn, user="u"),
            chat.chat.completions.create(model="gpt-4o", messages=turn, user="u"),
            messages.messages.create(
                model="prompt:greet@9.9.9", max_tokens=8, messages=turn, extra_body={}
            ),
        ]
        for call in calls:
            try:
                await call
            except (openai.APIStatusError, anthropic.APIStatusError) as exc:
                out.append((exc.status_code, str(exc.message)))
        return out

    found = asyncio.run(refusals())
    assert [status for status, _ in found] == [400, 422, 404, 422, 404]
    assert "give the unit" in found[0][1]
    assert "variables.name" in found[1][1]
    assert "greet@9.9.9" in found[4][1]
    # Nothing was sent or recorded for a refused call.
    server._app.state.gateways.get().journal.flush()
    assert rows(server.wb, "SELECT count(*) FROM production_logs") == [(0,)]


def test_a_gateway_token_calls_only_the_gateway_and_a_viewer_not_the_gateway(
    serving: tuple[Serving, str],
) -> None:
    server, token = serving
    viewer = server.wb.tokens.create("reader", "viewer")[1]
    chat = openai.OpenAI(api_key=viewer, base_url=f"{server.info.url}/v1", max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        chat.chat.completions.create(model="prompt:greet@latest", messages=[], user="u")
    assert (
        "reader is a viewer; POST /v1/chat/completions needs gateway" in refused.value.response.text
    )
    runs = httpx.get(f"{server.info.url}/v1/runs", headers={"Authorization": f"Bearer {token}"})
    assert runs.status_code == 403 and "shop-app is a gateway" in runs.text
    app = openai.OpenAI(api_key=token, base_url=f"{server.info.url}/v1", max_retries=0)
    answer = app.chat.completions.create(
        model="prompt:greet@latest", messages=[], user="u", extra_body={"variables": {"name": "A"}}
    )
    assert answer.choices[0].message.content


def test_a_killed_server_loses_no_answered_call_and_a_restart_records_nothing_twice(
    fake: RunningServer, db_path: Path, tmp_path: Path
) -> None:
    with Workbench.open(Settings.from_env()) as wb:
        token = set_up(wb)
    proc = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "--db", str(db_path), "serve", "--port", "0"],
        env={**os.environ, "PROMPTLAB_GATEWAY_FOLD_S": "3600"},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + PATIENCE_S
        while (info := find_server(db_path, {})) is None:
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
        chat = openai.OpenAI(api_key=token, base_url=f"{info.url}/v1", max_retries=0)
        traces = set()
        for n in range(30):
            raw = chat.chat.completions.with_raw_response.create(
                model="experiment:greet-ab",
                messages=[],
                user=f"unit-{n}",
                stream=n % 2 == 1,
                extra_body={"variables": {"name": "Ann"}},
            )
            if n % 2:
                for _ in raw.parse():
                    pass
            traces.add(raw.headers["promptlab-trace"])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The journal still holds the calls (folds were an hour apart): a restart stores them,
    # and a second one, finding them stored, adds nothing.
    assert journal_path(db_path).stat().st_size > 0
    for _ in range(2):
        with Workbench.open(Settings.from_env()) as wb:
            Gateways(wb, wb.experiments.get).close()
    stored = rows(db_path, "SELECT trace FROM production_logs")
    assert sorted(t for (t,) in stored) == sorted(traces)
    assert rows(db_path, "SELECT count(*) FROM exposures") == [(30,)]


@pytest.mark.parametrize("value", ["soon", "0", "-1", "inf", "nan"])
def test_a_fold_interval_that_is_not_positive_seconds_is_refused_naming_the_variable(
    value: str,
) -> None:
    from promptlab.errors import ConfigError

    with pytest.raises(ConfigError, match="^PROMPTLAB_GATEWAY_FOLD_S: expected a positive"):
        Settings.from_env({"PROMPTLAB_GATEWAY_FOLD_S": value})
    assert Settings.from_env({"PROMPTLAB_GATEWAY_FOLD_S": "2"}).gateway_fold_s == 2.0


def test_a_version_s_output_schema_is_sent_and_its_answer_checked(
    serving: tuple[Serving, str], fake: RunningServer
) -> None:
    server, token = serving
    schema = {
        "type": "object",
        "required": ["label"],
        "additionalProperties": False,
        "properties": {"label": {"type": "string", "enum": ["bug", "billing"]}},
    }
    template = Template.build(
        [{"role": "user", "content": "Label: {{ text }}"}],
        params={"model": "remote:gpt-test", "max_tokens": 200, "temperature": 0.2},
        variables={"text": {"type": "string"}},
        output_schema=schema,
    )
    server.wb.prompts.create("label", template)
    app = openai.OpenAI(api_key=token, base_url=f"{server.info.url}/v1", max_retries=0)
    answer = app.chat.completions.create(
        model="prompt:label@latest", messages=[], user="u", extra_body={"variables": {"text": "x"}}
    )
    assert answer.choices[0].message.content
    # Sent as a run sends it: the version's schema and sampling.
    (request,) = fake.requests()
    assert request["body"]["response_format"]["json_schema"]["schema"] == schema
    assert request["body"]["temperature"] == 0.2
    server._app.state.gateways.get().journal.flush()
    assert rows(server.wb, "SELECT check_status FROM production_logs") == [("valid",)]


def test_feedback_about_a_call_answered_a_moment_ago_finds_it(
    fake: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No fold in the background during the test: the event must find the call anyway.
    monkeypatch.setenv("PROMPTLAB_GATEWAY_FOLD_S", "3600")
    with Workbench.open(Settings.from_env()) as wb:
        token = set_up(wb)
        server = Serving(wb, port=0).start()
        try:
            app = openai.OpenAI(api_key=token, base_url=f"{server.info.url}/v1", max_retries=0)
            raw = app.chat.completions.with_raw_response.create(
                model="prompt:greet@latest",
                messages=[],
                user="u",
                extra_body={"variables": {"name": "A"}},
            )
            event = {"id": "ev-1", "trace": raw.headers["promptlab-trace"], "kind": "click"}
            sent = httpx.post(
                f"{server.info.url}/v1/feedback/events",
                json=event,
                headers={"Authorization": f"Bearer {token}"},
            )
            assert (sent.status_code, sent.json()) == (200, {"accepted": 1, "duplicates": 0})
        finally:
            server.stop()


def test_an_endpoint_that_sends_through_batches_cannot_serve_a_live_call(
    fake: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "batchy.yaml"
    endpoint = {
        "kind": "openai",
        "base_url": fake.openai_base_url,
        "api_key_env": "GATEWAY_TEST_KEY",
        "executor": "provider-batch",
        "models": {"*": {"context_window": 8192}},
    }
    path.write_text(yaml.safe_dump({"endpoints": {"batchy": endpoint}}))
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(path))
    with Workbench.open(Settings.from_env()) as wb:
        template = Template.build(
            [{"role": "user", "content": "Hi."}], params={"model": "batchy:gpt-test"}
        )
        wb.prompts.create("nightly", template)
        token = wb.tokens.create("shop-app", "gateway")[1]
        server = Serving(wb, port=0).start()
        try:
            app = openai.OpenAI(api_key=token, base_url=f"{server.info.url}/v1", max_retries=0)
            with pytest.raises(openai.APIStatusError) as refused:
                app.chat.completions.create(model="prompt:nightly@latest", messages=[], user="u")
            assert refused.value.status_code == 503
            assert "endpoint batchy: its calls go through provider-batch" in str(refused.value)
            assert fake.requests() == []  # nothing was sent
        finally:
            server.stop()
