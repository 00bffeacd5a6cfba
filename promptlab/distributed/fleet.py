"""The workers as an owner sees them: who is alive, who was lost, what waits in a queue.

Each worker adds itself to one roster in Redis at every heartbeat (a sorted set scored
by Redis's own clock, so no worker's or owner's clock is trusted) and leaves it when it
stops; a worker whose beat stopped without leaving (killed, its machine gone) counts as
lost until LOST_KEPT_S after its last beat. A queue's depth is the chunks waiting in the
broker's list for it (kombu keeps a list per priority). `promptlab serve`'s `/metrics`
exports these (server/metrics.py), with the age of its own oldest chunk no worker has
answered yet (`Dispatch.oldest_waiting`), for the alerts in deploy/prometheus/alerts.yml.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from promptlab.distributed import settings as keys

log = logging.getLogger(__name__)

#: The roster: worker name -> its last beat (Redis time, seconds).
ROSTER_KEY = "promptlab:workers"
#: Seconds a lost worker is still counted (then dropped from the roster).
LOST_KEPT_S = 3600
#: kombu's Redis transport: a queue's list per priority step beyond 0 is named
#: QUEUE + separator + step (kombu.transport.redis, default priority steps 0, 3, 6, 9).
PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
#: Seconds a scrape waits for Redis before it reports the broker down.
SOCKET_TIMEOUT_S = 1.0

# KEYS: the roster. ARGV: the worker. Its beat, scored by Redis's clock.
BEAT = """
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], tonumber(t[1]) + tonumber(t[2]) / 1000000, ARGV[1])
return 1
"""

# KEYS: the roster. ARGV: the heartbeat's TTL and how long the lost are kept (seconds).
# Returns {alive, lost}; the lost beyond ARGV[2] are dropped first.
COUNT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
local since = now - tonumber(ARGV[1])
local alive = redis.call('ZCOUNT', KEYS[1], since, '+inf')
local lost = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. since)
return {alive, lost}
"""


def queue_lists(queue: str) -> list[str]:
    """The broker's lists that hold a queue's waiting tasks."""
    return [queue, *(f"{queue}{PRIORITY_SEPARATOR}{step}" for step in PRIORITY_STEPS)]


@dataclass(frozen=True)
class FleetSnapshot:
    """The broker reachable or not; workers alive and lost; chunks waiting per queue."""

    broker_up: bool
    alive: int = 0
    lost: int = 0
    depths: dict[str, int] = field(default_factory=dict)


def fleet_snapshot(url: str, queues: Iterable[str]) -> FleetSnapshot:
    """Read the roster and the queues' lengths (three round trips); a broker that does
    not answer within SOCKET_TIMEOUT_S is reported down, never raised."""
    import redis

    client: Any = redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
    )
    try:
        alive, lost = client.eval(COUNT, 1, ROSTER_KEY, keys.HEARTBEAT_TTL_S, LOST_KEPT_S)
        pipe = client.pipeline(transaction=False)
        names = sorted(set(queues))
        for queue in names:
            for name in queue_lists(queue):
                pipe.llen(name)
        lengths = pipe.execute()
    except Exception as exc:  # noqa: BLE001 - a scrape reports it; it never fails on it
        log.warning("the workers' broker at %s did not answer: %s", _safe(url), exc)
        return FleetSnapshot(broker_up=False)
    finally:
        client.close()
    per = len(PRIORITY_STEPS) + 1
    depths = {q: sum(lengths[i * per : (i + 1) * per]) for i, q in enumerate(names)}
    return FleetSnapshot(broker_up=True, alive=int(alive), lost=int(lost), depths=depths)


def _safe(url: str) -> str:
    """The broker's address without its password (a URL may carry one)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}:{parts.port or ''}"
