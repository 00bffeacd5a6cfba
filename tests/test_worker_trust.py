"""What a worker believes of a task (issue 37, items 3 and 8): each test is an attack
that worked on the workers before: a forged task on the real Redis queue, a missing or
wrong signature, an endpoint configured otherwise, a key echoed into an answer kept in
Redis, a worker clock an hour ahead, a Redis restarted empty under a run.

Real `redis-server` and `promptlab worker` processes on loopback; the real SDKs (and
the lean HTTP adapters) over HTTP, to fakellm or to a capture server that records every
header it is sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import socket
import stat
import threading
import time
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.config import Settings
from promptlab.distributed import app as app_module
from promptlab.distributed import sender as sender_module
from promptlab.distributed import settings as keys
from promptlab.distributed.app import SEND_CHUNK, make_app
from promptlab.distributed.dispatch import Dispatch
from promptlab.distributed.wire import request_to_dict
from promptlab.errors import ErrorKind, ProviderError
from promptlab.fakellm.server import RunningServer
from promptlab.providers import build_provider
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.providers.config import EndpointConfig, load_endpoints
from promptlab.workbench import Workbench
from tests.cluster_fixtures import RedisServer, Workers, needs_redis
from tests.cluster_fixtures import redis_server as redis_server  # fixtures
from tests.cluster_fixtures import workers as workers
from tests.fakellm_fixtures import ServerFactory

pytestmark = needs_redis

#: Values only the worker's environment holds.
WORKER_KEY = "sk-worker-only-0123456789abcdef"
PRIVATE_VALUE = "private-value-0123456789abcdef"
#: Seconds any one wait in these tests may take at most (a busy 2-core machine).
BOUND_S = 120


# ---- a server that records what it is sent -------------------------------------------


class _Capture(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        seen = {name.lower(): value for name, value in self.headers.items()}
        server: CaptureServer = self.server  # type: ignore[assignment]
        server.seen.append(seen)
        key = seen.get("authorization") or seen.get("x-api-key") or ""
        text = f"your header said: {key}" if server.echo else "ok"
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if self.path.endswith("/messages"):
            body: dict[str, Any] = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        else:
            body = {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text},
                    }
                ],
                "usage": usage,
            }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if server.echo:  # a kept header (x-request-id) echoing the key too
            self.send_header("x-request-id", key)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return None


class CaptureServer(ThreadingHTTPServer):
    """A loopback chat server (OpenAI and Anthropic wire format) keeping every request's
    headers; with `echo`, its answers quote the key header they got."""

    daemon_threads = True

    def __init__(self, echo: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Capture)
        self.echo = echo
        self.seen: list[dict[str, str]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def header_values(self) -> list[str]:
        return [value for headers in self.seen for value in headers.values()]


@pytest.fixture
def capture() -> Iterator[CaptureServer]:
    server = CaptureServer()
    yield server
    server.shutdown()
    server.server_close()


# ---- helpers -------------------------------------------------------------------------


def request(item: str, timeout_s: float = 60.0) -> CompletionRequest:
    return CompletionRequest(
        model="gpt-4o-mini",
        messages=({"role": "user", "content": "hi"},),
        max_tokens=8,
        request_id=item,
        item_key=item,
        timeout_s=timeout_s,
    )


def ask(url: str, *calls: tuple[EndpointConfig, CompletionRequest]) -> list[Any]:
    """What an owner gets for each call through the workers (a response or an error)."""

    async def go() -> list[Any]:
        dispatch = Dispatch(url)
        try:
            return await asyncio.wait_for(
                asyncio.gather(
                    *(dispatch.complete(c, r) for c, r in calls), return_exceptions=True
                ),
                BOUND_S,
            )
        finally:
            dispatch.close()

    return asyncio.run(go())


def keyless(server: RunningServer, name: str = "fake") -> EndpointConfig:
    """What a run spec may declare: no key, on loopback."""
    return EndpointConfig(name=name, kind="openai", base_url=server.openai_base_url)


def providers_file(folder: Path, name: str, endpoints: dict[str, Any]) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump({"endpoints": endpoints}))
    return path


def forged_endpoint(kind: str, base_url: str, variable: str) -> dict[str, Any]:
    """The attack's endpoint: any loopback URL, any variable of the worker's environment."""
    return {
        "name": "x",
        "kind": kind,
        "base_url": base_url,
        "api_key_env": variable,
        "prices": {},
        "context_windows": {},
        "sampling_rules": {},
    }


def refusals(workers: Workers) -> int:
    return workers.log().count("refused a task")


# ---- the attacks ---------------------------------------------------------------------


def test_a_forged_task_never_gets_a_variable_of_the_worker_s_environment(
    workers: Workers, capture: CaptureServer, fakellm_factory: ServerFactory
) -> None:
    """Tasks put straight on the queue (no signature, a made-up one, the old layout and
    the new) naming the capture server and a variable of the worker: nothing of the
    worker's environment reaches the server, and each is refused once."""
    server = fakellm_factory()
    workers.concurrency = 1  # the tasks are taken in order: the owner's, last, ends it
    workers.extra_env = {"OPENAI_API_KEY": WORKER_KEY, "MY_PRIVATE_VAR": PRIVATE_VALUE}
    workers.start(1)
    app = make_app(workers.url)
    forged = 0
    for kind in ("openai", "anthropic"):
        base_url = capture.url + ("/v1" if kind == "openai" else "")
        for variable in ("OPENAI_API_KEY", "MY_PRIVATE_VAR", "HOME", "PATH"):
            endpoint = forged_endpoint(kind, base_url, variable)
            line = [request_to_dict(request(f"forged-{kind}-{variable}"))]
            app.send_task(SEND_CHUNK, args=["attacker", endpoint, line])
            ref = {"name": "x", "hash": "0" * 64, "config": endpoint}
            app.send_task(SEND_CHUNK, args=["attacker", ref, line], kwargs={"mac": "0" * 64})
            forged += 2
    (answer,) = ask(workers.url, (keyless(server), request("owner")))
    assert isinstance(answer, CompletionResponse), answer
    secrets = (WORKER_KEY, PRIVATE_VALUE, os.environ["HOME"], os.environ["PATH"])
    leaked = [v for v in capture.header_values() if any(s in v for s in secrets)]
    assert leaked == [] and capture.seen == []
    assert refusals(workers) == forged
    assert workers.procs[0].poll() is None


def test_a_task_without_a_valid_signature_is_not_executed(
    workers: Workers, fakellm_factory: ServerFactory, tmp_path: Path
) -> None:
    """A task that names only fakellm, keyless, as an owner would: unsigned, signed
    wrongly, or signed with another secret, it is refused once, acknowledged (not
    delivered again), and sends nothing."""
    server = fakellm_factory()
    workers.concurrency = 1
    workers.start(1)
    app = make_app(workers.url)
    endpoint = {
        "name": "fake",
        "kind": "openai",
        "base_url": server.openai_base_url,
        "prices": {},
        "context_windows": {},
        "sampling_rules": {},
    }
    line = [request_to_dict(request("unsigned"))]
    app.send_task(SEND_CHUNK, args=["owner-x", endpoint, line])  # the old layout, unsigned
    # Signed with a secret that is not the workers' (any other MAC is as good).
    other = hmac.new(b"another-secret", json.dumps(line).encode(), hashlib.sha256).hexdigest()
    app.send_task(SEND_CHUNK, args=["owner-x", endpoint, line], kwargs={"mac": other})
    app.send_task(SEND_CHUNK, args=["owner-x", endpoint, line], kwargs={"mac": "ü" * 64})
    (answer,) = ask(workers.url, (keyless(server), request("owner")))
    assert isinstance(answer, CompletionResponse), answer
    assert server.stats()["attempts"] == 1  # the owner's only
    assert refusals(workers) == 3
    import redis

    sync = redis.Redis.from_url(workers.url, decode_responses=True)
    try:
        assert sync.llen(keys.DEFAULT_QUEUE) == 0 and sync.hlen("unacked") == 0
        replies = [json.loads(r) for r in sync.lrange(keys.replies_key("owner-x"), 0, -1)]
        assert sync.get(keys.answer_key("unsigned:1")) is None  # nothing kept for a forger
    finally:
        sync.close()
    # The owner a refused task names is told why (a wrong secret stops its run at once).
    assert [r["answer"]["error"]["kind"] for r in replies] == ["auth"] * 3
    assert "signature" in replies[0]["answer"]["error"]["message"]


def test_an_endpoint_configured_otherwise_on_the_worker_is_refused(
    workers: Workers, capture: CaptureServer, fakellm_factory: ServerFactory, tmp_path: Path
) -> None:
    """The owner's `team` points at the capture server; the worker's (its providers file)
    at fakellm, with the key: the hashes differ, each ticket is answered with the
    reason, nothing is sent anywhere. An endpoint the worker does not know is refused
    alike; the same entry on both sides goes."""
    server = fakellm_factory()
    entry = {"kind": "openai", "base_url": server.openai_base_url, "api_key_env": "TEAM_KEY"}
    worker_file = providers_file(tmp_path, "worker.yaml", {"team": entry})
    workers.extra_env = {"PROMPTLAB_PROVIDERS": str(worker_file), "TEAM_KEY": WORKER_KEY}
    workers.start(1)
    owners = EndpointConfig(
        name="team", kind="openai", base_url=capture.url + "/v1", api_key_env="TEAM_KEY"
    )
    unknown = EndpointConfig(
        name="nowhere", kind="openai", base_url=capture.url + "/v1", api_key_env="TEAM_KEY"
    )
    same = load_endpoints(worker_file)["team"]
    first, differs, unknown_answer, alike = ask(
        workers.url,
        (owners, request("a")),
        (owners, request("b")),
        (unknown, request("c")),
        (same, request("d")),
    )
    assert capture.seen == []
    for error, why in (
        (first, "configured differently"),
        (differs, "configured differently"),
        (unknown_answer, "not configured"),
    ):
        assert isinstance(error, ProviderError) and error.kind is ErrorKind.AUTH, error
        assert why in str(error) and "nothing was sent" in str(error)
    assert "'team'" in str(differs) and "'nowhere'" in str(unknown_answer)
    assert isinstance(alike, CompletionResponse), alike
    assert server.stats()["successes"] == 1  # the entry both sides share


def test_an_answer_echoing_the_key_is_kept_redacted_in_redis(
    workers: Workers, tmp_path: Path
) -> None:
    """A provider answering with the Authorization header it got, in its text and in a
    kept header: what Redis keeps (and what the owner gets) has the key masked."""
    echo = CaptureServer(echo=True)
    try:
        entry = {"kind": "openai", "base_url": echo.url + "/v1", "api_key_env": "ECHO_TOKEN"}
        file = providers_file(tmp_path, "providers.yaml", {"echo": entry})
        workers.extra_env = {"PROMPTLAB_PROVIDERS": str(file), "ECHO_TOKEN": WORKER_KEY}
        workers.start(1)
        cfg = load_endpoints(file)["echo"]
        answers = ask(workers.url, *((cfg, request(f"echo-{i}")) for i in range(5)))
    finally:
        echo.shutdown()
        echo.server_close()
    assert len(echo.seen) == 5 and all(WORKER_KEY in v["authorization"] for v in echo.seen)
    import redis

    sync = redis.Redis.from_url(workers.url, decode_responses=True)
    try:
        stored = [sync.get(k) or "" for k in sync.scan_iter("promptlab:answer:*")]
    finally:
        sync.close()
    assert len(stored) == 5
    assert not any(WORKER_KEY in s for s in stored)
    assert all(
        "[redacted]" in json.loads(s)["answer"]["response"]["headers"]["x-request-id"]
        for s in stored
    )
    for answer in answers:
        assert isinstance(answer, CompletionResponse), answer
        assert WORKER_KEY not in answer.text and "[redacted]" in answer.text


def test_a_worker_whose_wall_clock_is_an_hour_ahead_still_sends(
    redis_server: RedisServer, fakellm_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker (in this process, its clock injected) an hour ahead of its owner: the
    owner says how long it still waits, not until when, so the worker sends."""
    from celery.contrib.testing.worker import start_worker

    server = fakellm_factory()
    ahead = types.SimpleNamespace(
        time=lambda: time.time() + 3600, monotonic=time.monotonic, sleep=time.sleep
    )
    monkeypatch.setattr(sender_module, "time", ahead)
    monkeypatch.setattr(app_module, "_sender", None)
    app = make_app(redis_server.url)
    try:
        with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False):
            answers = ask(
                redis_server.url, *((keyless(server), request(f"i{n}")) for n in range(5))
            )
    finally:
        if app_module._sender is not None:
            app_module._sender.close()
    assert all(isinstance(a, CompletionResponse) for a in answers), answers
    assert server.stats()["successes"] == 5


def test_a_run_goes_on_through_a_redis_restarted_empty(
    workers: Workers,
    redis_server: RedisServer,
    fakellm_factory: ServerFactory,
    tmp_path: Path,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis stopped and started again, empty, at about 30% of a run on two workers: the
    workers reconnect, the owner sends again what Redis lost, and the run completes
    with every item once; no item waits out its timeout, and nothing but what was in
    flight at the restart is sent twice."""
    workers.start(2)
    server = fakellm_factory(latency_ms=100)
    monkeypatch.setenv("PROMPTLAB_BROKER_URL", workers.url)
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(200)))
    spec = {
        "name": "restart",
        "dataset": str(dataset),
        "executor": "celery",
        "retry": {"timeout_s": 90},
        "variants": [
            {
                "name": "v",
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
                "model": "fake:gpt-4o-mini",
                "params": {"max_tokens": 16},
            }
        ],
        "endpoints": {
            "fake": {"kind": "openai", "base_url": server.openai_base_url, "concurrency": 16}
        },
    }
    with Workbench.open(Settings.from_env()) as wb:
        run_id = wb.runs.start(wb.runs.spec_from_data(spec))
        deadline = time.monotonic() + BOUND_S
        while server.stats()["successes"] < 60:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        redis_server.restart()
        done = wb.runs.wait(run_id, timeout=BOUND_S * 2)
    assert str(done.status) == "completed", done
    assert all(p.poll() is None for p in workers.procs), "a worker exited"
    with duckdb.connect(str(db_path), read_only=True) as conn:
        finals = conn.execute(
            "SELECT status, count(*), count(DISTINCT idempotency_key) FROM results "
            "WHERE run_id = ? GROUP BY status",
            [run_id],
        ).fetchall()
        timeouts = conn.execute(
            "SELECT count(*) FROM attempts WHERE run_id = ? AND error_kind = 'timeout'", [run_id]
        ).fetchone()
    assert finals == [("succeeded", 200, 200)]
    assert timeouts == (0,)  # nothing was lost: no ticket waited out its timeout
    stats = server.stats()
    # Sent twice at most: what was in flight at the restart (the endpoint's concurrency).
    assert stats["successes"] - 200 == stats["duplicate_completions"] <= 16


# ---- the secret ------------------------------------------------------------------------


def test_the_secret_file_is_created_owner_only_and_a_shared_one_is_refused(
    tmp_path: Path,
) -> None:
    from promptlab.distributed.trust import WORKER_SECRET_FILE_ENV, worker_secret
    from promptlab.errors import ConfigError

    path = tmp_path / "state" / "worker-secret"
    env = {WORKER_SECRET_FILE_ENV: str(path)}
    first = worker_secret("redis://127.0.0.1:6379/0", env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(first) >= 32
    assert worker_secret("redis://localhost:6379/0", env) == first  # the next process's
    path.chmod(0o640)
    with pytest.raises(ConfigError, match="chmod 600"):
        worker_secret("redis://[::1]:6379/0", env)
    set_one = {**env, "PROMPTLAB_WORKER_SECRET": "s" * 32}
    assert worker_secret("redis://broker.internal:6379/0", set_one) == b"s" * 32
    with pytest.raises(ConfigError, match="PROMPTLAB_WORKER_SECRET is not set"):
        worker_secret("redis://broker.internal:6379/0", env)


def test_a_worker_or_owner_off_loopback_without_the_secret_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from promptlab.errors import ConfigError

    monkeypatch.delenv("PROMPTLAB_WORKER_SECRET", raising=False)
    monkeypatch.setenv("PROMPTLAB_BROKER_URL", "redis://broker.invalid:6379/0")
    result = CliRunner().invoke(main, ["worker"])
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "PROMPTLAB_WORKER_SECRET" in lines[0], result.stderr
    with pytest.raises(ConfigError, match="PROMPTLAB_WORKER_SECRET"):
        Dispatch("redis://broker.invalid:6379/0")


# ---- keyless endpoints read no key -----------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("transport", ["sdk", "http"])
def test_a_keyless_endpoint_never_sends_a_key_from_the_environment(
    kind: str, transport: str, capture: CaptureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDKs read OPENAI_API_KEY / ANTHROPIC_API_KEY (and ANTHROPIC_AUTH_TOKEN) when
    given no key; a keyless endpoint gives them a placeholder, so none is sent."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.setenv(name, WORKER_KEY)
    base_url = capture.url + ("/v1" if kind == "openai" else "")
    cfg = EndpointConfig(name="local", kind=kind, base_url=base_url, transport=transport)

    async def send() -> CompletionResponse:
        provider = build_provider(cfg)
        try:
            return await provider.complete(request("keyless"))
        finally:
            await provider.aclose()

    answer = asyncio.run(send())
    assert answer.text == "ok"
    assert len(capture.seen) == 1
    assert not any(WORKER_KEY in value for value in capture.header_values()), capture.seen


# ---- answers ---------------------------------------------------------------------------


def _attack_replies(sync: Any, held: list[str], answered: list[str]) -> int:
    """Push onto the owner's replies list, for each held ticket, what anyone who reaches
    Redis could: a bare forged answer, one with a made-up signature, a real answer of
    another ticket (replayed), and a real reply cut in half. Returns how many lines."""
    (owner_key,) = list(sync.scan_iter("promptlab:owner:*"))
    replies = keys.replies_key(owner_key.rpartition(":")[2])
    fields = {"input_tokens": 1, "output_tokens": 1, "finish_reason": "stop"}
    forged = {"response": {"text": "FORGED", "model_version": "x", "latency_ms": 1.0, **fields}}
    lines = []
    for n, ticket in enumerate(held):
        stored = json.loads(sync.get(keys.answer_key(answered[n % len(answered)])))
        real = (
            {**stored, "ticket": ticket}
            if "mac" in stored
            else {"ticket": ticket, "answer": stored}
        )
        lines += [
            json.dumps({"ticket": ticket, "answer": forged}),
            json.dumps({"ticket": ticket, "worker": "evil", "answer": forged, "mac": "0" * 64}),
            json.dumps(real),
            json.dumps(real)[: len(json.dumps(real)) // 2],
        ]
    sync.rpush(replies, *lines)
    return len(lines)


def test_forged_replayed_and_cut_answers_are_never_recorded(
    workers: Workers,
    fakellm_factory: ServerFactory,
    tmp_path: Path,
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While 15 of a run's 20 requests are held at the provider, every kind of answer an
    attacker on Redis can push goes onto the owner's list for each: none is recorded,
    each item gets the answer its own worker sealed, the audit names that worker for
    each item, and `audit verify` passes. The drops are logged once per claimed sender."""
    import redis

    workers.start(1)
    server = fakellm_factory()
    server.gate(5)
    monkeypatch.setenv("PROMPTLAB_BROKER_URL", workers.url)
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(20)))
    spec = {
        "name": "forgeries",
        "dataset": str(dataset),
        "executor": "celery",
        "variants": [
            {
                "name": "v",
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
                "model": "fake:gpt-4o-mini",
                "params": {"max_tokens": 16},
            }
        ],
        "endpoints": {
            "fake": {"kind": "openai", "base_url": server.openai_base_url, "concurrency": 32}
        },
    }
    sync = redis.Redis.from_url(workers.url, decode_responses=True)
    try:
        with Workbench.open(Settings.from_env()) as wb:
            run_id = wb.runs.start(wb.runs.spec_from_data(spec))
            deadline = time.monotonic() + BOUND_S
            while (
                server.stats()["held"] < 15 or len(list(sync.scan_iter("promptlab:answer:*"))) < 5
            ):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            answered = [
                k.removeprefix("promptlab:answer:") for k in sync.scan_iter("promptlab:answer:*")
            ]
            claimed = [
                k.removeprefix("idempotent:send:") for k in sync.scan_iter("idempotent:send:*")
            ]
            held = sorted(set(claimed) - set(answered))
            assert len(held) == 15
            pushed = _attack_replies(sync, held, answered)
            (owner_key,) = list(sync.scan_iter("promptlab:owner:*"))
            replies = keys.replies_key(owner_key.rpartition(":")[2])
            while sync.llen(replies):  # the owner has read every line before any real answer
                assert time.monotonic() < deadline
                time.sleep(0.02)
            server.gate(None)
            done = wb.runs.wait(run_id, timeout=BOUND_S)
        sealed = {t: json.loads(sync.get(keys.answer_key(t))) for t in answered + held}
    finally:
        sync.close()
    assert pushed == 60 and str(done.status) == "completed", done
    with duckdb.connect(str(db_path), read_only=True) as conn:
        rows = conn.execute(
            "SELECT idempotency_key, status, attempts, output_text FROM results WHERE run_id = ?",
            [run_id],
        ).fetchall()
        events = conn.execute(
            "SELECT json_extract_string(payload, '$.served_by') FROM audit_events "
            "WHERE run_id = ? AND kind = 'result'",
            [run_id],
        ).fetchall()
    assert len(rows) == 20
    for key, status, attempts, output in rows:
        own = sealed[f"{key}:1"]
        own_text = own.get("answer", own)["response"]["text"]
        assert (status, attempts, output) == ("succeeded", 1, own_text)
        assert "FORGED" not in output
    # One worker sealed every answer, and each result event names it.
    (worker,) = {s["worker"] for s in sealed.values()}
    assert worker.startswith(f"{socket.gethostname()}:{workers.procs[0].pid}:")
    assert [w for (w,) in events] == [worker] * 20
    dropped = [r.getMessage() for r in caplog.records if "dropped an answer" in r.getMessage()]
    senders = ("(unnamed)", "evil", worker, "(unreadable)")
    assert len(dropped) == 4  # once per claimed sender, not once per line
    assert all(any(f"from worker {name}: " in m for m in dropped) for name in senders), dropped
    verified = CliRunner().invoke(main, ["--db", str(db_path), "audit", "verify"])
    assert verified.exit_code == 0, verified.output


def test_a_ticket_its_owner_gave_up_on_is_not_sent_again_by_a_later_delivery(
    workers: Workers, fakellm_factory: ServerFactory
) -> None:
    """The owner stops waiting for a ticket a worker is sending (held at the provider),
    the worker is killed -9, and its task is delivered again to another worker (as the
    broker does once its visibility timeout passes): the ticket is found answered
    ("its owner stopped waiting") and the provider is not paid for it a second time."""
    import redis

    from promptlab.distributed.trust import endpoint_ref, open_reply, signed_task, worker_secret

    server = fakellm_factory()
    server.gate(0)
    workers.start(2)
    cfg, sent = keyless(server), request("given-up")

    async def give_up() -> None:
        dispatch = Dispatch(workers.url)
        try:
            waiting = asyncio.ensure_future(dispatch.complete(cfg, sent))
            deadline = time.monotonic() + BOUND_S
            while (await asyncio.to_thread(server.stats))["held"] < 1:
                assert time.monotonic() < deadline, "the worker never sent it"
            waiting.cancel()  # the owner's timeout
            with pytest.raises(asyncio.CancelledError):
                await waiting
        finally:
            await asyncio.sleep(0)
            dispatch.close()

    asyncio.run(give_up())
    sync = redis.Redis.from_url(workers.url, decode_responses=True)
    try:
        deadline = time.monotonic() + BOUND_S
        while sync.get(keys.answer_key("given-up:1")) is None:
            assert time.monotonic() < deadline, "the owner did not mark the ticket given up"
            time.sleep(0.02)
        # Kill the worker sending it (its claim names it); the other gets it again.
        holder = str(sync.get(keys.claim_key("given-up:1")))
        (index,) = [i for i, p in enumerate(workers.procs) if f":{p.pid}:" in holder]
        workers.kill(index)
        secret = worker_secret(workers.url, workers.env())
        args, kwargs = signed_task(secret, "probe", endpoint_ref(cfg), [request_to_dict(sent, 60)])
        make_app(workers.url).send_task(SEND_CHUNK, args=args, kwargs=kwargs)
        popped = sync.blpop([keys.replies_key("probe")], timeout=BOUND_S)
    finally:
        sync.close()
        server.gate(None)
    assert popped is not None, "the second delivery answered nothing"
    reply = open_reply(secret, popped[1])
    assert "stopped waiting" in reply.answer["error"]["message"]
    assert server.stats()["attempts"] == 1  # the provider saw the ticket once
