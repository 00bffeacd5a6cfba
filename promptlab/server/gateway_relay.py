"""The owner's side of its `promptlab gateway` processes (`serve --gateway-relay`).

Two threads while the owner serves (promptlab/gateway/relay.py has the keys and why):
- the publisher builds the snapshot from the store every PUBLISH_S, and at once when
  an experiment changes here; it seals and sets it when what it says changed, or when
  Redis holds anything but the owner's latest (an older snapshot set again, a Redis
  that restarted empty). Each snapshot's serial grows, so gateways refuse older ones;
- the taker (gateway_records.py) stores the gateways' records from the stream.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson
import redis

from promptlab.gateway.relay import RECORDS_STREAM, SNAPSHOT_KEY
from promptlab.gateway.snapshot import GATEWAY_ROLE, sealed, version_dict
from promptlab.records.prompts import PromptVersion
from promptlab.server.gateway_records import RecordTaker
from promptlab.workbench import Workbench

log = logging.getLogger(__name__)

#: Seconds between builds of the snapshot.
PUBLISH_S = 0.5


class GatewayRelay:
    """Publish the snapshot and take the gateways' records, between start() and stop()."""

    def __init__(self, wb: Workbench, client: redis.Redis, secret: bytes) -> None:
        self._wb = wb
        self._client = client
        self._secret = secret
        #: What the latest snapshot says (its time and serial left out), and its bytes.
        self._said: bytes | None = None
        self._sealed: bytes | None = None
        self._serial = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._publisher = threading.Thread(target=self._publish_loop, name="promptlab-publish")
        self.taker = RecordTaker(wb, client, secret)

    def start(self) -> GatewayRelay:
        # A kill, a ramp or new weights go out at once, not at the next tick (the
        # publisher's thread does it: the change's own thread never waits on Redis).
        self._wb.experiments.on_change(lambda _config: self._wake.set())
        self._publisher.start()
        self.taker.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._publisher.join(30)
        self.taker.stop()

    def publish(self) -> bool:
        """Set the snapshot if what it says changed, or Redis holds another; True if set."""
        document = build_document(self._wb)
        said = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
        if said == self._said and self._client.get(SNAPSHOT_KEY) == self._sealed:
            return False
        # Nanoseconds of the owner's clock, and never less than the last: a restarted
        # owner's first snapshot is newer than any its gateways hold.
        self._serial = max(self._serial + 1, time.time_ns())
        stamped = {**document, "serial": self._serial, "built_at": self._now()}
        self._sealed = sealed(stamped, self._secret)
        self._client.set(SNAPSHOT_KEY, self._sealed)
        self._said = said
        return True

    def waiting(self) -> int | None:
        """Records in the stream not stored yet; None when the broker does not answer."""
        try:
            return int(self._client.xlen(RECORDS_STREAM))
        except redis.RedisError:
            return None

    def _now(self) -> str:
        return self._wb.store.clock.now().isoformat()

    def _publish_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish()
            except Exception as exc:  # noqa: BLE001 - tried again at the next tick
                log.warning("publishing the gateways' snapshot failed (%r); retrying", exc)
            self._wake.wait(PUBLISH_S)
            self._wake.clear()


def build_document(wb: Workbench) -> dict[str, Any]:
    """The document as plain JSON values, read from the owner's store (its time and
    serial are added as it is sealed)."""
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
        "experiments": [config.to_dict() for config in experiments],
        "versions": [version_dict(v) for v in versions.values()],
        "refs": refs,
        "callers": {
            digest: {"name": t.name, "service": t.service, "token_id": t.token_id}
            for digest, t in wb.tokens.active_by_hash().items()
            if t.role == GATEWAY_ROLE
        },
    }
