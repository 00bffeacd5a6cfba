"""The owner's taker of its gateways' records (`serve --gateway-relay`; the keys and why
are promptlab/gateway/relay.py's).

One thread reads RECORDS_STREAM in the owner's consumer group and stores what verifies:
calls through LiveCallStore (skipped when their trace is stored), feedback events as
`POST /v1/feedback/events` stores them, acting as the application that sent them. An
entry is acknowledged (and deleted) only once the store holds what it says, so:

- entries read but not stored (an owner killed, a store that failed, a reply lost on
  the way) are read again: at start, and after any failure, the consumer's pending
  entries come first;
- a feedback event about a call not stored yet (answered a moment ago by another
  gateway, whose journal has not handed it on) waits, unacknowledged, and is tried
  again every second for FEEDBACK_WAIT_S before it is dropped and logged;
- an entry that does not verify, or that Redis trimmed before it was read, is dropped,
  logged and counted: it is never stored.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import orjson
import redis

from promptlab.audit.actor import acting_as
from promptlab.errors import FeedbackError
from promptlab.gateway.relay import (
    CALL,
    FEEDBACK,
    OWNER_CONSUMER,
    OWNER_GROUP,
    RECORDS_STREAM,
    record_verifies,
)
from promptlab.store.live_calls import LiveCallStore
from promptlab.workbench import Workbench

log = logging.getLogger(__name__)

#: Entries read from the stream at once; the taker's wait for new ones (ms).
READ_COUNT, READ_BLOCK_MS = 2_000, 250
#: Seconds a feedback event about a call not stored yet waits for it.
FEEDBACK_WAIT_S = 60.0
#: Seconds between tries of the waiting feedback.
RETRY_S = 1.0


class RecordTaker:
    """Store the gateways' records, between start() and stop()."""

    def __init__(self, wb: Workbench, client: redis.Redis, secret: bytes) -> None:
        self._wb = wb
        self._client = client
        self._secret = secret
        self._calls = LiveCallStore(wb.store)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="promptlab-gateway-take")
        #: Feedback waiting for its call: entry id -> (caller, events, first tried).
        self._waiting: dict[bytes, tuple[str, Any, float]] = {}
        self._tried_at = 0.0
        #: Calls stored; entries dropped (refused: do not verify, or the store refuses
        #: them; trimmed: gone from Redis before they were read). Tests read them.
        self.stored = 0
        self.refused = 0
        self.trimmed = 0

    def start(self) -> RecordTaker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        backlog = True  # first what this consumer read and did not store, then new ones
        while not self._stop.is_set():
            try:
                self._ensure_group()
                taken = self.take(backlog)
                backlog = backlog and taken > 0
                self._retry_waiting()
            except Exception as exc:  # noqa: BLE001 - left unacknowledged, read again
                level = logging.WARNING if isinstance(exc, redis.RedisError) else logging.ERROR
                log.log(level, "gateway records: not stored (%r); trying again", exc)
                backlog = True
                self._stop.wait(1.0)

    def _ensure_group(self) -> None:
        try:
            self._client.xgroup_create(RECORDS_STREAM, OWNER_GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def take(self, backlog: bool = False) -> int:
        """Store one read's worth of records; return how many entries it read."""
        answer: Any = self._client.xreadgroup(
            OWNER_GROUP,
            OWNER_CONSUMER,
            {RECORDS_STREAM: "0" if backlog else ">"},
            count=READ_COUNT,
            block=None if backlog else READ_BLOCK_MS,
        )
        entries = [(i, f) for i, f in (answer[0][1] if answer else []) if i not in self._waiting]
        if not entries:
            return 0
        calls: list[Mapping[str, Any]] = []
        feedback: list[tuple[bytes, str, Any]] = []
        for entry_id, fields in entries:
            opened = self._opened(fields or {})
            if opened is not None and opened[0] == CALL:
                calls.append(opened[2])
            elif opened is not None:
                feedback.append((entry_id, opened[1], opened[2]))
        self.stored += self._store_calls(calls)
        done = [entry_id for entry_id, _ in entries]
        for entry_id, caller, events in feedback:  # after the calls they may be about
            if not self._store_feedback(caller, events, time.monotonic()):
                self._waiting[entry_id] = (caller, events, time.monotonic())
                done.remove(entry_id)
        self._acknowledge(done)
        return len(entries)

    def _acknowledge(self, ids: list[bytes]) -> None:
        if ids:
            pipe = self._client.pipeline(transaction=True)
            pipe.xack(RECORDS_STREAM, OWNER_GROUP, *ids)
            pipe.xdel(RECORDS_STREAM, *ids)
            pipe.execute()

    def _opened(self, fields: Mapping[bytes, bytes]) -> tuple[str, str, Any] | None:
        """(kind, gateway, value) of an entry that verifies; None (counted) otherwise."""
        if not fields:
            self.trimmed += 1
            log.warning("gateway records: dropped an entry Redis trimmed before it was read")
            return None
        kind = fields.get(b"kind", b"").decode(errors="replace")
        gateway = fields.get(b"gateway", b"").decode(errors="replace")
        body = fields.get(b"body", b"")
        mac = fields.get(b"mac", b"").decode(errors="replace")
        if kind not in (CALL, FEEDBACK) or not record_verifies(
            self._secret, gateway, kind, body, mac
        ):
            self._refuse(f"an entry whose MAC does not verify (said to be from {gateway[:80]!r})")
            return None
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            value = None
        if kind == CALL and isinstance(value, dict) and isinstance(value.get("trace"), str):
            value["gateway"] = gateway  # the process that answered it, in its audit event
            return kind, gateway, value
        if kind == FEEDBACK and isinstance(value, dict) and isinstance(value.get("caller"), str):
            return kind, value["caller"], value.get("events")
        self._refuse(f"a {kind} from {gateway[:80]!r} that is not one")
        return None

    def _store_calls(self, calls: list[Mapping[str, Any]]) -> int:
        if not calls:
            return 0
        try:
            return self._calls.add(calls)
        except Exception:  # noqa: BLE001 - a bad record, or the store is away: see below
            if len(calls) == 1:
                raise
        # One bad record must not hold the rest back: each alone. When none can be
        # stored the store is what fails (full, closing): all stay in Redis for later.
        stored, failures = 0, []
        for call in calls:
            try:
                stored += self._calls.add([call])
            except Exception as exc:  # noqa: BLE001 - judged below, once all were tried
                failures.append(exc)
        if len(failures) == len(calls):
            raise failures[0]
        for failure in failures:
            self._refuse(f"a call the store cannot take: {failure}")
        return stored

    def _store_feedback(self, caller: str, events: Any, first_tried: float) -> bool:
        """True once settled (stored, or refused for good); False: its call may come."""
        try:
            with acting_as(caller):
                self._wb.analysis.record_feedback_events({"events": events})
        except FeedbackError as exc:
            waiting = time.monotonic() - first_tried < FEEDBACK_WAIT_S
            if waiting and "no call with trace" in str(exc):
                return False
            self._refuse(f"feedback from {caller[:80]!r} the store refuses: {exc}")
        return True

    def _retry_waiting(self) -> None:
        if not self._waiting or time.monotonic() - self._tried_at < RETRY_S:
            return
        self._tried_at = time.monotonic()
        settled = [
            entry_id
            for entry_id, (caller, events, first) in list(self._waiting.items())
            if self._store_feedback(caller, events, first)
        ]
        self._acknowledge(settled)
        for entry_id in settled:
            del self._waiting[entry_id]

    def _refuse(self, what: str) -> None:
        self.refused += 1
        log.warning("gateway records: dropped %s", what)
