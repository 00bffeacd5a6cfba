"""The owner's side of its `promptlab gateway` processes (`serve --gateway-relay`).

Two threads while the owner serves (promptlab/gateway/relay.py has the keys and why):
- the publisher builds the snapshot from the store every PUBLISH_S and, when what it
  says changed, seals it and sets it in Redis: a kill, a ramp or a label move is read by
  every gateway within a second;
- the taker reads the gateways' records from the stream in a consumer group, stores
  those whose MAC verifies (calls through LiveCallStore, feedback events as
  `POST /v1/feedback/events` stores them), and acknowledges them once stored. Entries
  this owner read but had not stored when it was killed are read again at its start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import orjson
import redis

from promptlab.errors import FeedbackError
from promptlab.gateway.relay import (
    CALL,
    FEEDBACK,
    OWNER_CONSUMER,
    OWNER_GROUP,
    RECORDS_STREAM,
    SNAPSHOT_KEY,
    record_mac,
)
from promptlab.gateway.snapshot import GATEWAY_ROLE, sealed, version_dict
from promptlab.records.prompts import PromptVersion
from promptlab.server.periodic import Periodic
from promptlab.store.live_calls import LiveCallStore
from promptlab.workbench import Workbench

log = logging.getLogger(__name__)

#: Seconds between builds of the snapshot.
PUBLISH_S = 0.5
#: Entries read from the stream at once; the taker's wait for new ones (ms).
READ_COUNT, READ_BLOCK_MS = 2_000, 250


class GatewayRelay:
    """Publish the snapshot and take the gateways' records, between start() and stop()."""

    def __init__(self, wb: Workbench, client: redis.Redis, secret: bytes) -> None:
        self._wb = wb
        self._client = client
        self._secret = secret
        self._published: bytes | None = None
        self._publishing = threading.Lock()
        self._calls = LiveCallStore(wb.store)
        self._publisher = Periodic(
            "promptlab-gateway-publish", PUBLISH_S, self.publish, "publishing the snapshot"
        )
        self._stop = threading.Event()
        self._taker = threading.Thread(target=self._take_loop, name="promptlab-gateway-take")
        #: Records stored, and refused (a MAC that does not verify, a body that is no
        #: record), by this owner (tests and /metrics read them).
        self.stored = 0
        self.refused = 0

    def start(self) -> GatewayRelay:
        self._publish_now()
        # A kill, a ramp or new weights go out at once, not at the next tick.
        self._wb.experiments.on_change(lambda _config: self._publish_now())
        self._publisher.start()
        self._taker.start()
        return self

    def stop(self) -> None:
        self._publisher.stop()
        self._stop.set()
        self._taker.join(30)

    def publish(self) -> bool:
        """Set the snapshot when what it says changed (not when only its time did)."""
        with self._publishing:
            document = build_document(self._wb)
            said = orjson.dumps({**document, "built_at": None}, option=orjson.OPT_SORT_KEYS)
            if said == self._published:
                return False
            self._client.set(SNAPSHOT_KEY, sealed(document, self._secret))
            self._published = said
            return True

    def _publish_now(self) -> None:
        try:
            self.publish()
        except Exception:  # noqa: BLE001 - the publisher tries again every PUBLISH_S
            log.exception("publishing the gateways' snapshot failed; retrying")

    # ---- the records ---------------------------------------------------------------

    def _take_loop(self) -> None:
        backlog = True  # first what this consumer read before a restart, then new ones
        while not self._stop.is_set():
            try:
                self._ensure_group()
                taken = self.take(backlog)
                backlog = backlog and taken > 0
            except redis.RedisError as exc:
                log.warning("gateway records: the broker is unreachable (%s); retrying", exc)
                self._stop.wait(1.0)
            except Exception:  # noqa: BLE001 - logged; left unacknowledged, read again
                log.exception("storing gateway records failed; they stay in Redis")
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
        entries = answer[0][1] if answer else []
        if not entries:
            return 0
        calls: list[Mapping[str, Any]] = []
        feedback: list[Any] = []
        for _entry_id, fields in entries:
            opened = self._opened(fields)
            if opened is not None:
                (calls if opened[0] == CALL else feedback).append(opened[1])
        self.stored += self._store_calls(calls)
        for body in feedback:  # after the calls they may be about
            self._store_feedback(body)
        ids = [entry_id for entry_id, _ in entries]
        pipe = self._client.pipeline(transaction=False)
        pipe.xack(RECORDS_STREAM, OWNER_GROUP, *ids)
        pipe.xdel(RECORDS_STREAM, *ids)
        pipe.execute()
        return len(entries)

    def _opened(self, fields: Mapping[bytes, bytes]) -> tuple[str, Any] | None:
        kind = fields.get(b"kind", b"").decode(errors="replace")
        gateway = fields.get(b"gateway", b"").decode(errors="replace")
        body = fields.get(b"body", b"")
        mac = fields.get(b"mac", b"").decode(errors="replace")
        if kind not in (CALL, FEEDBACK) or mac != record_mac(self._secret, gateway, kind, body):
            self._refuse(f"an entry whose MAC does not verify (said to be from {gateway[:80]!r})")
            return None
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            value = None
        if kind == CALL and not (isinstance(value, dict) and isinstance(value.get("trace"), str)):
            self._refuse(f"a call from {gateway[:80]!r} that is not one")
            return None
        if kind == CALL:
            value["gateway"] = gateway  # the process that answered it, in its audit event
        return kind, value

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

    def _store_feedback(self, body: Any) -> None:
        try:
            self._wb.analysis.record_feedback_events(body)
        except FeedbackError as exc:
            self._refuse(f"feedback the store refuses: {exc}")

    def _refuse(self, what: str) -> None:
        self.refused += 1
        log.warning("gateway records: dropped %s", what)


def build_document(wb: Workbench) -> dict[str, Any]:
    """The document as plain JSON values, read from the owner's store."""
    versions: dict[str, PromptVersion] = {}
    refs: dict[str, str] = {}
    experiments = wb.experiments.list()
    for config in experiments:
        for variant in config.variants:
            if variant.prompt_version_id is not None:
                name = variant.prompt.partition("@")[0]
                version = wb.prompts.resolve(f"{name}@{variant.prompt_version_id}")
                versions[version.id] = version
    for summary in wb.prompts.list():
        labelled = {"latest": summary.latest, **wb.prompts.labels(summary.name)}
        for label, version in labelled.items():
            versions[version.id] = version
            refs[f"{summary.name}@{label}"] = version.id
    for version in versions.values():
        refs[version.ref] = version.id
    return {
        "built_at": wb.store.clock.now().isoformat(),
        "experiments": [config.to_dict() for config in experiments],
        "versions": [version_dict(v) for v in versions.values()],
        "refs": refs,
        "callers": {
            digest: {"name": t.name, "service": t.service, "token_id": t.token_id}
            for digest, t in wb.tokens.active_by_hash().items()
            if t.role == GATEWAY_ROLE
        },
    }
