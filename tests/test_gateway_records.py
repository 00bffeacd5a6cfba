"""The owner's side of its gateway processes, in this process on a real Redis and a real
DuckDB file (promptlab/server/gateway_records.py, gateway_relay.py): what it does with
entries left pending, a store that fails once, feedback that comes before its call, an
entry Redis trimmed, and an older snapshot set again in Redis."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from promptlab.config import Settings
from promptlab.gateway.relay import (
    OWNER_CONSUMER,
    OWNER_GROUP,
    RECORDS_STREAM,
    SNAPSHOT_KEY,
    RecordSender,
    SnapshotFollower,
)
from promptlab.server.gateway_records import RecordTaker
from promptlab.server.gateway_relay import GatewayRelay
from promptlab.store.live_calls import LiveCallStore
from promptlab.workbench import Workbench
from tests.cluster_fixtures import RedisServer, needs_redis
from tests.cluster_fixtures import redis_server as redis_server  # fixtures
from tests.test_gateway import fake as fake  # fixtures
from tests.test_gateway import rows, set_up

pytestmark = needs_redis

SECRET = b"a-secret-of-thirty-two-characters"
#: Seconds a test waits for what it expects before it fails (never a sleep to pass).
PATIENCE_S = 60.0


@pytest.fixture
def parts(
    fake: object, redis_server: RedisServer
) -> Iterator[tuple[Workbench, redis.Redis, RecordSender]]:
    with Workbench.open(Settings.from_env()) as wb:
        set_up(wb)
        client = redis.Redis.from_url(redis_server.url)
        try:
            yield wb, client, RecordSender(client, SECRET, "gw-test")
        finally:
            client.close()


def a_call(wb: Workbench, trace: str) -> dict[str, Any]:
    version = wb.prompts.resolve("greet@latest")
    return {
        "trace": trace,
        "at": "2026-12-07T12:00:00+00:00",
        "caller": "shop-app",
        "unit": "unit-1",
        "version_id": version.id,
        "version": version.ref,
        "endpoint": "remote",
        "model": "gpt-test",
        "latency_ms": 12.5,
    }


def until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def pending(client: redis.Redis) -> int:
    return sum(int(g["pending"]) for g in client.xinfo_groups(RECORDS_STREAM))


def traces(wb: Workbench) -> list[str]:
    return sorted(str(t) for (t,) in rows(wb, "SELECT trace FROM production_logs"))


def test_entries_left_pending_and_a_store_that_failed_once_are_stored_once(
    parts: tuple[Workbench, redis.Redis, RecordSender], monkeypatch: pytest.MonkeyPatch
) -> None:
    wb, client, sender = parts
    sender.calls([a_call(wb, f"tr_{n}") for n in range(3)])
    # An owner read them and was killed before it stored them: pending, not acknowledged.
    client.xgroup_create(RECORDS_STREAM, OWNER_GROUP, id="0")
    client.xreadgroup(OWNER_GROUP, OWNER_CONSUMER, {RECORDS_STREAM: ">"})
    assert pending(client) == 3
    real_add, failures = LiveCallStore.add, []

    def failing_at_first(store: LiveCallStore, calls: Any) -> int:
        # The batch and then each call alone: the store itself fails, not one record.
        if len(failures) < 4:
            failures.append(len(calls))
            raise RuntimeError("the store is busy")
        return real_add(store, calls)

    monkeypatch.setattr(LiveCallStore, "add", failing_at_first)
    taker = RecordTaker(wb, client, SECRET).start()
    try:
        until(lambda: taker.stored == 3, "the pending entries were not stored")
        sender.calls([a_call(wb, "tr_new")])
        until(lambda: taker.stored == 4, "a new entry was not stored")
        until(lambda: pending(client) == 0, "entries were left pending")
    finally:
        taker.stop()
    assert failures == [3, 1, 1, 1]
    assert traces(wb) == ["tr_0", "tr_1", "tr_2", "tr_new"]
    assert client.xlen(RECORDS_STREAM) == 0


def test_feedback_that_comes_before_its_call_waits_for_it(
    parts: tuple[Workbench, redis.Redis, RecordSender],
) -> None:
    wb, client, sender = parts
    event = {"id": "ev-1", "trace": "tr_late", "kind": "click", "time": "2026-12-07T12:00:01Z"}
    # Answered by another gateway, whose journal has not handed the call on yet.
    sender.feedback({"caller": "shop-app", "events": [event]})
    taker = RecordTaker(wb, client, SECRET).start()
    try:
        until(lambda: client.xlen(RECORDS_STREAM) == 1 and pending(client) == 1, "not read")
        sender.calls([a_call(wb, "tr_late")])
        until(lambda: client.xlen(RECORDS_STREAM) == 0, "the feedback was not stored")
    finally:
        taker.stop()
    assert taker.refused == 0
    assert rows(wb, "SELECT trace FROM feedback WHERE event_id = 'ev-1'") == [("tr_late",)]
    actors = rows(wb, "SELECT actor FROM audit_events WHERE kind = 'feedback.received'")
    assert actors == [("shop-app",)]


def test_an_entry_redis_trimmed_before_it_was_read_is_counted_and_never_stored(
    parts: tuple[Workbench, redis.Redis, RecordSender],
) -> None:
    wb, client, sender = parts
    sender.calls([a_call(wb, "tr_gone"), a_call(wb, "tr_kept")])
    client.xgroup_create(RECORDS_STREAM, OWNER_GROUP, id="0")
    read = client.xreadgroup(OWNER_GROUP, OWNER_CONSUMER, {RECORDS_STREAM: ">"})
    client.xdel(RECORDS_STREAM, read[0][1][0][0])  # pending, its fields gone
    taker = RecordTaker(wb, client, SECRET).start()
    try:
        until(lambda: pending(client) == 0, "the trimmed entry stayed pending")
    finally:
        taker.stop()
    assert (taker.trimmed, taker.stored) == (1, 1)
    assert traces(wb) == ["tr_kept"]


def test_an_older_snapshot_set_again_is_refused_and_the_owner_sets_its_own_back(
    parts: tuple[Workbench, redis.Redis, RecordSender],
) -> None:
    wb, client, _sender = parts
    relay = GatewayRelay(wb, client, SECRET)
    assert relay.publish()
    before_the_kill = client.get(SNAPSHOT_KEY)
    wb.experiments.update("greet-ab", killed=True, note="bad variant")
    assert relay.publish()
    follower = SnapshotFollower(client, SECRET)
    follower.refresh()
    assert follower.snapshot is not None and follower.snapshot.experiment("greet-ab").killed
    client.set(SNAPSHOT_KEY, before_the_kill)  # someone who reaches Redis replays it
    follower.refresh()
    assert follower.snapshot.experiment("greet-ab").killed
    assert "older than the one held" in str(follower.problem)
    assert relay.publish()  # nothing changed here, but Redis holds another: set again
    assert not relay.publish()
    follower.refresh()
    assert follower.problem is None and follower.snapshot.experiment("greet-ab").killed
