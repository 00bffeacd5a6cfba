"""Stateless gateways (issue 57, item 3): `promptlab gateway` processes serve the owner's
experiments with no database, from the snapshot the owner (`serve --gateway-relay`)
keeps in Redis, and hand their calls to it through Redis. Killed -9 under traffic, the
owner or a gateway loses no answered call and stores none twice; a gateway keeps
answering while its owner is down; a kill reaches it; forged snapshots and records are
refused. Real processes, a real Redis, the real `openai` SDK and fakellm on loopback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import redis

from promptlab.config import Settings
from promptlab.fakellm.server import RunningServer
from promptlab.gateway.relay import RECORDS_STREAM, SNAPSHOT_KEY
from promptlab.server.discovery import find_server
from promptlab.workbench import Workbench
from tests.cluster_fixtures import RedisServer, free_port, needs_redis
from tests.cluster_fixtures import redis_server as redis_server  # fixtures
from tests.test_gateway import fake as fake  # fixtures
from tests.test_gateway import rows, set_up

pytestmark = needs_redis

#: Seconds a test waits for what it expects before it fails (never a sleep to pass).
PATIENCE_S = 120.0


class Fleet:
    """One owner and its gateways as processes, on one database and one Redis."""

    def __init__(self, db: Path, folder: Path, broker: str) -> None:
        self.db, self.folder, self.broker = db, folder, broker
        self.owner: subprocess.Popen[bytes] | None = None
        self.gateways: dict[int, subprocess.Popen[bytes]] = {}
        self.env = {**os.environ, "PROMPTLAB_BROKER_URL": broker}

    def start_owner(self) -> None:
        log = (self.folder / "owner.log").open("ab")
        self.owner = subprocess.Popen(
            [sys.executable, "-m", "promptlab", "--db", str(self.db), "serve", "--port", "0"]
            + ["--gateway-relay"],
            env=self.env,
            cwd=self.folder,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + PATIENCE_S
        while find_server(self.db, {}) is None:
            assert self.owner.poll() is None, self.log("owner")
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)

    def start_gateway(self, port: int) -> str:
        log = (self.folder / f"gateway-{port}.log").open("ab")
        self.gateways[port] = subprocess.Popen(
            [sys.executable, "-m", "promptlab", "gateway", "--port", str(port)]
            + ["--state-dir", str(self.folder / f"gateway-{port}"), "--name", f"gw-{port}"],
            env=self.env,
            cwd=self.folder,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + PATIENCE_S
        while health(url) is None:
            assert self.gateways[port].poll() is None, self.log(f"gateway-{port}")
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.05)
        return url

    def kill(self, proc: subprocess.Popen[bytes] | None) -> None:
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop(self, proc: subprocess.Popen[bytes] | None) -> None:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(60)

    def stop_all(self) -> None:
        for proc in [*self.gateways.values(), self.owner]:
            self.stop(proc)

    def log(self, name: str) -> str:
        """The process's output, its end (for a failure's message)."""
        return self.whole_log(name)[-3000:]

    def whole_log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stored(self, client: redis.Redis) -> list[str]:
        """The traces stored once every record is (the owner stopped to read them)."""
        self.drained(client)
        self.stop(self.owner)
        return stored_traces(self.db)

    def drained(self, client: redis.Redis) -> None:
        """Until every record is stored: no gateway journal holds one, the stream is
        empty and the owner has acknowledged all it read."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            journals = [p for p in self.folder.glob("gateway-*/calls.jsonl") if p.stat().st_size]
            groups = client.xinfo_groups(RECORDS_STREAM) if client.exists(RECORDS_STREAM) else []
            pending = sum(int(g["pending"]) for g in groups)
            if not journals and client.xlen(RECORDS_STREAM) == 0 and pending == 0:
                return
            assert time.monotonic() < deadline, (journals, pending, self.log("owner"))
            time.sleep(0.05)


def health(url: str) -> dict[str, Any] | None:
    """The gateway's /healthz once it holds a snapshot; None before (or not listening)."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as answer:  # noqa: S310
            return dict(json.loads(answer.read()))
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def chat(url: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=token, base_url=f"{url}/v1", max_retries=0, timeout=30)


def call(client: openai.OpenAI, unit: str, stream: bool = False) -> tuple[str, str]:
    """One call: its trace and the variant served."""
    raw = client.chat.completions.with_raw_response.create(
        model="experiment:greet-ab",
        messages=[],
        user=unit,
        stream=stream,
        extra_body={"variables": {"name": "Ann"}},
    )
    if stream:
        for _ in raw.parse():
            pass
    return raw.headers["promptlab-trace"], raw.headers["promptlab-variant"]


class Traffic:
    """Calls through one gateway on a thread until stopped: the traces answered, and the
    errors (a call cut by a killed gateway has no answer, and so no trace to keep)."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client
        self.traces: list[str] = []
        self.errors: list[Exception] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                self.traces.append(call(self.client, f"unit-{n}", stream=n % 3 == 0)[0])
            except Exception as exc:  # noqa: BLE001 - a cut stream raises httpx's errors
                self.errors.append(exc)

    def until(self, count: int) -> None:
        deadline = time.monotonic() + PATIENCE_S
        while len(self.traces) < count:
            assert time.monotonic() < deadline and self._thread.is_alive(), self.errors[-3:]
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


@pytest.fixture
def fleet(
    fake: RunningServer, redis_server: RedisServer, db_path: Path, tmp_path: Path
) -> Iterator[tuple[Fleet, str, redis.Redis]]:
    with Workbench.open(Settings.from_env()) as wb:
        token = set_up(wb)
    cluster = Fleet(db_path, tmp_path, redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    try:
        cluster.start_owner()
        yield cluster, token, client
    finally:
        cluster.stop_all()
        client.close()


def stored_traces(db: Path) -> list[str]:
    return sorted(str(t) for (t,) in rows(db, "SELECT trace FROM production_logs"))


def test_a_gateway_serves_the_owner_s_experiment_and_the_owner_stores_each_call_once(
    fleet: tuple[Fleet, str, redis.Redis],
) -> None:
    cluster, token, client = fleet
    cluster.env["PROMPTLAB_LOG_FORMAT"] = "json"
    port = free_port()
    url = cluster.start_gateway(port)
    assert health(url) is not None
    gateway = chat(url, token)
    answered = [call(gateway, f"unit-{n}", stream=n % 2 == 1) for n in range(40)]
    assert {variant for _, variant in answered} == {"kind", "brief"}
    # A viewer's token, or none, is not a gateway's: refused before anything is sent.
    with pytest.raises(openai.AuthenticationError):
        call(chat(url, "pl_not-a-token"), "unit-1")
    cluster.drained(client)
    # The owner's /metrics says what its relay took (and Prometheus alerts on it).
    info = find_server(cluster.db, {})
    assert info is not None
    scrape = urllib.request.Request(
        f"{info.url}/metrics", headers={"Authorization": f"Bearer {info.token}"}
    )
    with urllib.request.urlopen(scrape, timeout=30) as answer:  # noqa: S310 - loopback
        text = answer.read().decode()
    assert 'promptlab_gateway_records_total{outcome="stored"} 40.0' in text
    assert "promptlab_gateway_records_waiting 0.0" in text
    assert "promptlab_gateway_relay_up 1.0" in text
    assert cluster.stored(client) == sorted(trace for trace, _ in answered)
    # The gateway's log is JSON a collector takes whole: an access line per answer,
    # naming who called, the refused caller too.
    cluster.stop(cluster.gateways[port])
    lines = [json.loads(line) for line in cluster.whole_log(f"gateway-{port}").splitlines()]
    calls = [(x["status"], x["principal"]) for x in lines if x.get("path", "").startswith("/v1/")]
    assert calls.count((200, "shop-app")) == 40 and (401, "-") in calls
    assert rows(cluster.db, "SELECT count(*) FROM exposures") == [(40,)]
    # Each call's audit event names the application's token, whichever gateway took it.
    actors = rows(cluster.db, "SELECT DISTINCT actor FROM audit_events WHERE chain = 'gateway'")
    assert actors == [("shop-app",)]


def test_forged_snapshots_and_records_are_refused_and_the_gateway_serves_on(
    fleet: tuple[Fleet, str, redis.Redis],
) -> None:
    cluster, token, client = fleet
    url = cluster.start_gateway(free_port())
    gateway = chat(url, token)
    first, _ = call(gateway, "unit-1")
    # Someone who reaches Redis writes a snapshot of their own and a record: neither
    # verifies under the owner's secret.
    cluster.stop(cluster.owner)  # so it does not publish over the forgery at once
    forged = {"body": json.dumps({"callers": {}}), "mac": "0" * 64}
    client.set(SNAPSHOT_KEY, json.dumps(forged))
    client.xadd(
        RECORDS_STREAM,
        {"kind": "call", "gateway": "evil", "body": json.dumps({"trace": "tr_forged"}), "mac": "0"},
    )
    deadline = time.monotonic() + PATIENCE_S
    while "MAC does not verify" not in str((health(url) or {}).get("problem")):
        assert time.monotonic() < deadline, health(url)
        time.sleep(0.05)
    second, _ = call(gateway, "unit-2")  # served from the last snapshot that verified
    cluster.start_owner()
    assert cluster.stored(client) == sorted([first, second])
    assert "dropped an entry whose MAC does not verify" in cluster.whole_log("owner")


def test_an_owner_killed_9_under_traffic_loses_no_call_and_its_gateway_answers_throughout(
    fleet: tuple[Fleet, str, redis.Redis],
) -> None:
    cluster, token, client = fleet
    url = cluster.start_gateway(free_port())
    traffic = Traffic(chat(url, token))
    try:
        traffic.until(30)
        cluster.kill(cluster.owner)
        down = len(traffic.traces)
        traffic.until(down + 60)  # answered while no owner runs
        cluster.start_owner()
        traffic.until(len(traffic.traces) + 30)
    finally:
        traffic.stop()
    assert traffic.errors == []
    assert cluster.stored(client) == sorted(traffic.traces)


def test_a_gateway_killed_9_under_traffic_hands_on_every_answered_call_when_it_restarts(
    fleet: tuple[Fleet, str, redis.Redis],
) -> None:
    cluster, token, client = fleet
    port = free_port()
    # Its journal is folded an hour apart: the kill finds answered calls in it.
    cluster.env["PROMPTLAB_GATEWAY_FOLD_S"] = "3600"
    url = cluster.start_gateway(port)
    traffic = Traffic(chat(url, token))
    try:
        traffic.until(50)
        cluster.kill(cluster.gateways[port])
    finally:
        traffic.stop()
    journal = cluster.folder / f"gateway-{port}" / "calls.jsonl"
    assert journal.stat().st_size > 0
    cluster.start_gateway(port)  # on the same folder: it folds what the kill left
    # Every answered call, once, and at most the one in flight at the kill: it is in the
    # journal before its last byte, which the kill may then have cut from its caller.
    stored = cluster.stored(client)
    assert len(set(stored)) == len(stored) and set(traffic.traces) <= set(stored)
    assert len(stored) - len(traffic.traces) <= 1


def test_a_kill_on_the_owner_reaches_every_gateway(
    fleet: tuple[Fleet, str, redis.Redis],
) -> None:
    cluster, token, _client = fleet
    gateways = [chat(cluster.start_gateway(free_port()), token) for _ in range(2)]
    units = [f"unit-{n}" for n in range(20)]
    assert {call(gateways[0], u)[1] for u in units} == {"kind", "brief"}
    subprocess.run(
        [sys.executable, "-m", "promptlab", "--db", str(cluster.db), "experiment", "set"]
        + ["greet-ab", "--kill", "--note", "bad variant"],
        env=cluster.env,
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + PATIENCE_S
    for gateway in gateways:
        while {call(gateway, u)[1] for u in units} != {"kind"}:
            assert time.monotonic() < deadline, "the kill did not reach the gateway"
