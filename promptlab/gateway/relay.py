"""What an owner and its `promptlab gateway` processes pass through Redis (the broker the
workers use): the owner's snapshot one way (snapshot.py), the gateways' records the other.

- SNAPSHOT_KEY holds the owner's sealed snapshot; a gateway reads it every REFRESH_S
  (a kill or a label move reaches every gateway within one second) and keeps serving
  from the last one that verified while Redis or the owner is away. Each snapshot has a
  serial that only grows: an older one set again is refused, and the owner sets its
  own again when Redis holds anything else.
- RECORDS_STREAM takes each answered call, and each feedback event, as one stream entry
  sealed with an HMAC under the shared secret: anyone who reaches Redis can add
  entries, so the owner stores only what verifies. The owner reads the stream in a
  consumer group and acknowledges an entry only once the store holds it, so an entry
  read by an owner killed before it stored it is read again when it restarts; a call
  stored twice is skipped by its trace, a feedback event by its id. Redis holds the
  stream in memory: a Redis that restarts without persistence (appendonly) loses what
  the owner had not taken yet.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import redis

from promptlab.distributed.trust import canonical
from promptlab.gateway.snapshot import Snapshot, opened

log = logging.getLogger(__name__)

SNAPSHOT_KEY = "promptlab:gateway:snapshot"
RECORDS_STREAM = "promptlab:gateway:records"
#: The owner's consumer group and name (one owner per database).
OWNER_GROUP, OWNER_CONSUMER = "owner", "owner"
#: Seconds between a gateway's reads of the snapshot.
REFRESH_S = 0.25
#: What a record's MAC covers besides the record: a snapshot's never verifies as one.
RECORD_CONTEXT = "promptlab.gateway-record/2"
#: Entries the stream keeps at most (the oldest dropped first): a bound on what gateways
#: can pile up while the owner is away, about an hour and a half of 100 calls a second.
MAX_STREAM_ENTRIES = 500_000
CALL, FEEDBACK = "call", "feedback"


def record_mac(secret: bytes, gateway: str, kind: str, body: bytes) -> str:
    # One JSON list: no choice of gateway name can shift bytes between the fields.
    signed = canonical([RECORD_CONTEXT, gateway, kind, body.decode("utf-8", "replace")])
    return hmac.new(secret, signed, hashlib.sha256).hexdigest()


def record_verifies(secret: bytes, gateway: str, kind: str, body: bytes, mac: str) -> bool:
    return hmac.compare_digest(mac, record_mac(secret, gateway, kind, body))


class RecordSender:
    """A gateway's side of RECORDS_STREAM: its calls (as the journal folds them) and its
    feedback events, sealed, one pipeline per batch."""

    def __init__(self, client: redis.Redis, secret: bytes, gateway: str) -> None:
        self._client = client
        self._secret = secret
        self.gateway = gateway

    def calls(self, calls: Sequence[Mapping[str, Any]]) -> int:
        """Add `calls` to the stream; the journal keeps them when this raises."""
        self._add(CALL, [orjson.dumps(call) for call in calls])
        return len(calls)

    def feedback(self, body: Any) -> None:
        self._add(FEEDBACK, [orjson.dumps(body)])

    def _add(self, kind: str, bodies: list[bytes]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for body in bodies:
            fields: dict[Any, Any] = {
                "kind": kind,
                "gateway": self.gateway,
                "body": body,
                "mac": record_mac(self._secret, self.gateway, kind, body),
            }
            pipe.xadd(RECORDS_STREAM, fields, maxlen=MAX_STREAM_ENTRIES, approximate=True)
        pipe.execute()


class SnapshotFollower:
    """A gateway's copy of the owner's snapshot, read again every REFRESH_S on a thread."""

    def __init__(self, client: redis.Redis, secret: bytes, every_s: float = REFRESH_S) -> None:
        self._client = client
        self._secret = secret
        self._every_s = every_s
        self._raw: bytes | None = None
        self.snapshot: Snapshot | None = None
        #: The one before: a call that read an experiment from it finds its version.
        self.previous: Snapshot | None = None
        #: The last read's problem (None: it read and verified).
        self.problem: str | None = "no snapshot read yet"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="promptlab-snapshot", daemon=True)

    def start(self) -> SnapshotFollower:
        self.refresh()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def refresh(self) -> None:
        """Read the snapshot now; on any trouble keep serving from the one held."""
        try:
            raw: Any = self._client.get(SNAPSHOT_KEY)
        except redis.RedisError as exc:
            self._say(f"the broker is unreachable ({exc})")
            return
        if raw is None:
            self._say("the owner has published no snapshot yet (serve --gateway-relay)")
            return
        if raw == self._raw:
            self.problem = None
            return
        try:
            read = opened(raw, self._secret)
        except Exception as exc:  # noqa: BLE001 - whatever a document does, serving goes on
            self._say(f"the snapshot in Redis is refused: {exc}")
            return
        held = self.snapshot
        if held is not None and read.serial < held.serial:
            # A sealed document can be set again by anyone who reaches Redis: an older
            # one would bring back a revoked token or an experiment before its kill.
            self._say("the snapshot in Redis is older than the one held (set again?)")
            return
        self.previous, self.snapshot = held, read
        self._raw = raw
        self.problem = None

    def _say(self, problem: str) -> None:
        if problem != self.problem:
            held = "serving from the last one read" if self.snapshot else "serving nothing"
            log.warning("gateway snapshot: %s; %s", problem, held)
        self.problem = problem

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self.refresh()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any read
                self._say(f"reading the snapshot failed: {exc!r}")
