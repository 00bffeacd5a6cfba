"""Guarded rollouts end to end (issue 57): units served through the live gateway with the
real `openai` SDK (and, streamed, the real `anthropic` SDK) over fakellm on loopback, a
real `promptlab serve` in process and a real DuckDB file. 2,000 units against a variant
whose endpoint fails 30% of attempts and answers 600 ms slower, checked by the owner by
itself: the variant is killed, and every call started a check after the kill gets
control; a healthy one advances through its stages and, at the last, its version gets
the label `production`.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml

from promptlab.config import Settings
from promptlab.errors import ExperimentError
from promptlab.experiments.parsing import parse_experiment_file
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.prompts.templates import Template
from promptlab.server.run import Serving
from promptlab.workbench import Workbench

KEY = "sk-rollout-test-0123456789abcdefghijkl"
NAME = "greet-rollout"


def experiment(**rollout: Any) -> dict[str, Any]:
    return {
        "name": NAME,
        "ramp": 50,
        "variants": [
            {"name": "control", "prompt": "greet", "control": True, "weight": 1},
            {"name": "concise", "prompt": "greet-brief", "model": "other:gpt-test", "weight": 1},
        ],
        "rollout": {
            "variant": "concise",
            "stages": [50, 100],
            "min_units_per_stage": 100,
            "guardrails": [{"metric": "error_rate", "worse_by": 0.02}],
            **rollout,
        },
    }


@pytest.fixture
def fakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[RunningServer, RunningServer]]:
    """Control's endpoint, and the variant's: its FakeLLMConfig fields as the test's
    parameter asks (failing 30% of attempts, 600 ms slower)."""
    faults = getattr(request, "param", {})
    with (
        serve_in_thread(FakeLLMConfig(port=0)) as good,
        serve_in_thread(FakeLLMConfig(port=0, **faults)) as other,
    ):
        models = {"*": {"context_window": 8192}}
        endpoints = {
            name: {
                "kind": "openai",
                "base_url": server.openai_base_url,
                "api_key_env": "ROLLOUT_TEST_KEY",
                "models": models,
            }
            for name, server in (("good", good), ("other", other))
        }
        path = tmp_path / "providers.yaml"
        path.write_text(yaml.safe_dump({"endpoints": endpoints}))
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(path))
        monkeypatch.setenv("ROLLOUT_TEST_KEY", KEY)
        # The test checks by hand: no background check races it.
        monkeypatch.setenv("PROMPTLAB_ROLLOUT_CHECK_S", "3600")
        yield good, other


def set_up(wb: Workbench, **rollout: Any) -> str:
    for name, text in (("greet", "Be kind."), ("greet-brief", "Be brief.")):
        template = Template.build(
            [{"role": "system", "content": text}, {"role": "user", "content": "Hi {{ name }}."}],
            params={"model": "good:gpt-test", "max_tokens": 50},
            variables={"name": {"type": "string"}},
        )
        wb.prompts.create(name, template)
    wb.experiments.add(experiment(**rollout))
    return wb.tokens.create("shop-app", "gateway")[1]


async def timed_units(server: Serving, token: str, units: range) -> list[tuple[float, str, str]]:
    """Each unit's call through the gateway, in order of start: when it started (on
    time.time, the clock audit events are stamped by), the unit and the variant served."""
    client = openai.AsyncOpenAI(api_key=token, base_url=f"{server.info.url}/v1", max_retries=0)
    room = asyncio.Semaphore(40)
    calls: list[tuple[float, str, str]] = []

    async def call(unit: str) -> None:
        async with room:
            started = time.time()
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model=f"experiment:{NAME}",
                    messages=[],
                    user=unit,
                    extra_body={"variables": {"name": unit}},
                )
                calls.append((started, unit, raw.headers["promptlab-variant"]))
            except openai.APIStatusError as exc:  # every attempt failed: still served
                calls.append((started, unit, exc.response.headers["promptlab-variant"]))

    await asyncio.gather(*(call(f"u-{i}") for i in units))
    await client.close()
    return sorted(calls)


async def serve_units(server: Serving, token: str, units: range) -> dict[str, str]:
    """Each unit's call through the gateway: the variant it was served."""
    return {unit: variant for _, unit, variant in await timed_units(server, token, units)}


@pytest.fixture
def serving(fakes: tuple[RunningServer, RunningServer]) -> Iterator[tuple[Serving, str]]:
    with Workbench.open(Settings.from_env()) as wb:
        token = set_up(wb)
        server = Serving(wb, port=0).start()
        try:
            yield server, token
        finally:
            server.stop()


#: Seconds between the owner's own checks in the live test (the server's Periodic).
CHECK_S = 0.5


@pytest.mark.parametrize("fakes", [{"fail_rate": 0.3, "latency_ms": 600.0}], indirect=True)
def test_a_failing_slow_variant_is_killed_live_and_its_units_get_control_by_the_next_check(
    fakes: tuple[RunningServer, RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,000 units through the gateway with the real openai SDK; the variant's endpoint
    fails 30% of attempts and answers 600 ms slower; the owner checks by itself every
    CHECK_S. The rollout kills it; a call started a check after the kill gets control;
    control's calls never failed."""
    monkeypatch.setenv("PROMPTLAB_ROLLOUT_CHECK_S", str(CHECK_S))
    guardrails = [
        {"metric": "error_rate", "worse_by": 0.02},
        {"metric": "latency_p90_ms", "worse_by": 300},
    ]
    with Workbench.open(Settings.from_env()) as wb:
        token = set_up(wb, guardrails=guardrails)
        server = Serving(wb, port=0).start()
        try:
            calls = asyncio.run(timed_units(server, token, range(2000)))
        finally:
            server.stop()
        assert wb.experiments.get(NAME).killed
        status = wb.rollouts.status(NAME)
        assert (status.state, status.last_action) == ("killed", "kill")
        assert "regressed" in str(status.reason)
        with wb.store.read() as cur:
            # The kill's own decision: a loaded machine's first checks may advance a stage
            # (more units to the variant) before its regression is clear.
            (killed_at,) = cur.execute(
                "SELECT epoch(min(\"at\")) FROM audit_events WHERE kind = 'rollout.decision' "
                "AND json_extract_string(payload, '$.action') = 'kill'"
            ).fetchone() or (None,)
            failed = cur.execute(
                "SELECT count(*) FROM production_logs WHERE variant = 'control' "
                "AND (http_status <> 200 OR failed_attempts > 0)"
            ).fetchone()
        assert killed_at is not None
        # The variant had its units before the kill; none started a check after it.
        before = [v for at, _, v in calls if at < killed_at]
        later = [v for at, _, v in calls if at > killed_at + CHECK_S]
        assert before.count("concise") >= 100
        assert later and set(later) == {"control"}, len(later)
        assert failed == (0,)
        assert wb.audit.verify().ok
        revision = wb.experiments.get(NAME).revision  # the kill's (a stage may come first)
    # The CLI reads it from the database the server left.
    shown = subprocess.run(
        [sys.executable, "-m", "promptlab", "--db", str(wb.settings.db_path)]
        + ["rollout", "status", NAME],
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"{NAME} (revision {revision}): concise killed" in shown.stdout


async def streamed_units(server: Serving, token: str, units: range) -> dict[str, str]:
    """Each unit's call streamed through the gateway with the real `anthropic` SDK
    (`metadata.user_id` names the unit): the variant served, each stream read whole."""
    client = anthropic.AsyncAnthropic(api_key=token, base_url=server.info.url, max_retries=0)
    room = asyncio.Semaphore(40)
    served: dict[str, str] = {}

    async def call(unit: str) -> None:
        async with room:
            try:
                async with client.messages.stream(
                    model=f"experiment:{NAME}",
                    max_tokens=32,
                    messages=[{"role": "user", "content": "hello"}],
                    metadata={"user_id": unit},
                    extra_body={"variables": {"name": unit}},
                ) as stream:
                    final = await stream.get_final_message()
                assert final.content[0].text  # type: ignore[union-attr]
                served[unit] = stream.response.headers["promptlab-variant"]
            except anthropic.APIStatusError as exc:  # every attempt failed: still served
                served[unit] = exc.response.headers["promptlab-variant"]

    await asyncio.gather(*(call(f"s-{i}") for i in units))
    await client.close()
    return served


@pytest.mark.parametrize("fakes", [{"fail_rate": 0.3}], indirect=True)
def test_streamed_anthropic_calls_feed_the_rollout_and_get_control_once_killed(
    serving: tuple[Serving, str],
) -> None:
    server, token = serving
    wb = server.wb
    first = asyncio.run(streamed_units(server, token, range(600)))
    assert sum(v == "concise" for v in first.values()) >= 100
    server._app.state.gateways.settle()
    decision = wb.rollouts.check(NAME)
    assert decision is not None and decision.action == "kill", decision
    assert "error_rate" in decision.reason
    again = asyncio.run(streamed_units(server, token, range(300)))
    assert set(again.values()) == {"control"}
    with wb.store.read() as cur:
        failed = cur.execute(
            "SELECT count(*) FROM production_logs WHERE variant = 'control' "
            "AND (http_status <> 200 OR failed_attempts > 0)"
        ).fetchone()
    assert failed == (0,)


def test_a_healthy_variant_advances_stage_by_stage_and_is_promoted(
    serving: tuple[Serving, str],
) -> None:
    server, token = serving
    wb = server.wb
    asyncio.run(serve_units(server, token, range(500)))
    server._app.state.gateways.settle()
    decision = wb.rollouts.check(NAME)
    assert decision is not None and decision.action == "advance", decision
    assert wb.experiments.get(NAME).ramp == 100
    # The next stage waits for its own units.
    assert wb.rollouts.check(NAME).action == "wait"  # type: ignore[union-attr]
    asyncio.run(serve_units(server, token, range(500, 900)))
    server._app.state.gateways.settle()
    decision = wb.rollouts.check(NAME)
    assert decision is not None and decision.action == "complete", decision
    variant = wb.experiments.get(NAME).variant("concise")
    assert wb.prompts.resolve("greet-brief@production").id == variant.prompt_version_id
    status = wb.rollouts.status(NAME)
    assert status.state == "complete"
    # Each check's difference is kept: the tiles draw them as a line.
    (error_rate,) = status.guardrails
    assert len(error_rate.effects) == 3 and error_rate.effects[-1] == error_rate.effect
    assert wb.rollouts.check(NAME) is None  # an ended rollout is not checked


def test_a_paused_rollout_is_not_moved_until_resumed(serving: tuple[Serving, str]) -> None:
    server, token = serving
    wb = server.wb
    assert wb.rollouts.pause(NAME, "looking into it").state == "paused"
    asyncio.run(serve_units(server, token, range(500)))
    server._app.state.gateways.settle()
    assert wb.rollouts.check(NAME) is None
    assert wb.experiments.get(NAME).ramp == 50
    with pytest.raises(ExperimentError, match="is paused: it cannot pause"):
        wb.rollouts.pause(NAME)
    assert wb.rollouts.resume(NAME).state == "running"
    assert wb.rollouts.abort(NAME).state == "aborted"
    assert wb.experiments.get(NAME).killed


def test_the_owner_checks_rollouts_by_itself(
    fakes: tuple[RunningServer, RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_ROLLOUT_CHECK_S", "0.05")
    with Workbench.open(Settings.from_env()) as wb:
        set_up(wb)
        server = Serving(wb, port=0).start()
        try:
            deadline = 600  # checks, not seconds: a busy machine only takes longer
            while server.rollouts.runs < 2 and deadline:
                deadline -= 1
                server._thread.join(0.05)  # type: ignore[union-attr]
            assert server.rollouts.runs >= 2
            assert wb.rollouts.status(NAME).state == "running"
        finally:
            server.stop()


@pytest.mark.parametrize(
    ("rollout", "error"),
    [
        ({"variant": "control"}, "rollout.variant: expected one of the experiment's variants"),
        ({"stages": [50, 25]}, "rollout.stages[1]: stages only rise"),
        ({"stages": [10, 100]}, "rollout.stages: the ramp (50) must be one of the stages"),
        (
            {"guardrails": [{"metric": "errors", "worse_by": 0.02}]},
            "rollout.guardrails[0].metric: expected one of error_rate, latency_p90_ms, ctr",
        ),
        (
            {"guardrails": [{"metric": "ctr", "worse_by": 2}]},
            "rollout.guardrails[0].worse_by: a rate's margin is a share under 1",
        ),
        ({"on_regression": "panic"}, "rollout.on_regression: expected one of kill, hold"),
    ],
)
def test_a_bad_rollout_is_refused_naming_its_field(rollout: dict[str, Any], error: str) -> None:
    with pytest.raises(ExperimentError, match=re.escape(error)):
        parse_experiment_file(experiment(**rollout), source="exp.yaml")


def test_a_rollout_keeps_only_its_last_checks(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from promptlab.store import Store, rollouts

    monkeypatch.setattr(rollouts, "MAX_LOOKS", 20)  # the rule, on fewer checks
    with Store(db_path) as store:
        rows = rollouts.RolloutRows(store)
        start = datetime(2030, 1, 1, tzinfo=UTC)
        for i in range(30):
            rows.add_looks(
                NAME, start + timedelta(seconds=i), [("ctr", float(i), i - 1.0, i + 1.0)]
            )
        kept = rows.effects(NAME)["ctr"]
    assert kept == tuple(float(i) for i in range(10, 30))


class Hooks(http.server.BaseHTTPRequestHandler):
    """A team's webhook receiver on loopback: the bodies it was posted."""

    received: list[dict[str, Any]] = []
    arrived = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers["Content-Length"])
        Hooks.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()
        Hooks.arrived.set()

    def log_message(self, *args: Any) -> None:
        pass


def test_a_decision_is_posted_to_an_allowed_host_and_never_to_another(
    fakes: tuple[RunningServer, RunningServer],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/rollouts?token=team-secret"
    monkeypatch.setenv("PROMPTLAB_WEBHOOK_HOSTS", "127.0.0.1")
    try:
        with Workbench.open(Settings.from_env()) as wb:
            set_up(wb, on_decision_url=hook)
            wb.rollouts.pause(NAME, "a look")
            assert Hooks.arrived.wait(60), "no post arrived"
            assert Hooks.received == [{"experiment": NAME, "action": "pause", "reason": "a look"}]
        # The same address on a server that allows no host: nothing is sent.
        monkeypatch.setenv("PROMPTLAB_WEBHOOK_HOSTS", "")
        Hooks.arrived.clear()
        with Workbench.open(Settings.from_env()) as wb, caplog.at_level("WARNING"):
            wb.rollouts.resume(NAME)
        assert "host '127.0.0.1' is not in PROMPTLAB_WEBHOOK_HOSTS" in caplog.text
        assert "team-secret" not in caplog.text  # the address's query is never logged
        assert len(Hooks.received) == 1
    finally:
        receiver.shutdown()


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://example.com/x", "expected an http:// or https:// address with a host"),
        ("https://user:pw@example.com/x", "an address with a user or password in it is refused"),
    ],
)
def test_a_bad_webhook_address_is_refused_in_the_file(url: str, error: str) -> None:
    with pytest.raises(ExperimentError, match=re.escape(f"rollout.on_decision_url: {error}")):
        parse_experiment_file(experiment(on_decision_url=url), source="exp.yaml")
