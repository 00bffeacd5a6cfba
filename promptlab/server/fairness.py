"""No caller can starve the rest: bounds each principal's share of the server.

Route handlers that touch the database run on one thread pool (THREADS). A principal
may have at most `in_flight` requests open at once (most of the pool stays free for
everyone else), may send at most RATE_PER_S requests a second on average (a bucket of
BURST), may hold at most MAX_LONG_POLLS job long polls (which wait on the event loop,
holding no thread) and at most MAX_JOBS jobs running or waiting their turn. Past any
of these the request is answered 429 with Retry-After, naming the bound, and nothing
is done; promptlab's client waits that long and asks again (a few times).

The owner's token (the server's operator, whose CLI may fan out) gets OWNER_IN_FLIGHT
and no rate bound. An application's gateway token (role gateway) calls only the live
gateway, whose routes wait on the event loop holding no thread, and whose pace the
endpoint's shared limiter sets: it gets LIVE_IN_FLIGHT and no rate bound. Every other
token, whatever its role, gets the same bounds.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Threads that run route handlers (anyio's default limiter is 40): sized so that the
#: owner's share and three other principals' at once still leave threads free.
THREADS = 64
#: Requests one principal may have open at once (owner: OWNER_IN_FLIGHT).
IN_FLIGHT = 12
OWNER_IN_FLIGHT = 24
#: Calls an application's gateway token may have open at once (production traffic).
LIVE_IN_FLIGHT = 2_048
#: Requests a second one principal may send on average, and the bucket's size.
RATE_PER_S = 50.0
BURST = 200
#: Long polls (`GET /v1/jobs/{id}?wait=`) one principal may hold at once.
MAX_LONG_POLLS = 8
#: Jobs one principal may have running or waiting at once.
MAX_JOBS = 8


class TooMany(Exception):
    """A principal's bound is reached: a 429 with `retry_after_s`, naming the bound."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s

    @property
    def retry_after(self) -> str:
        """The Retry-After header's whole seconds (at least 1)."""
        return str(max(1, math.ceil(self.retry_after_s)))


@dataclass
class _Share:
    open: int = 0
    long_polls: int = 0
    jobs: int = 0
    tokens: float = float(BURST)
    at: float = field(default_factory=time.monotonic)


class Fairness:
    """Every principal's share, by token id; thread-safe."""

    def __init__(self, owner_id: str, clock: object = time) -> None:
        self.owner_id = owner_id
        self._clock = clock
        self._lock = threading.Lock()
        self._shares: dict[str, _Share] = {}

    def _share(self, who: str) -> _Share:
        share = self._shares.get(who)
        if share is None:
            share = self._shares[who] = _Share(at=self._now())
        return share

    def _now(self) -> float:
        return float(self._clock.monotonic())  # type: ignore[attr-defined]

    def admit(self, who: str, live: bool = False) -> Callable[[], None]:
        """Count one open request of `who`'s (the token's id); the call that releases
        it. TooMany past its rate or its open requests. `live`: a gateway token."""
        owner = who == self.owner_id
        unpaced = owner or live
        limit = LIVE_IN_FLIGHT if live else OWNER_IN_FLIGHT if owner else IN_FLIGHT
        with self._lock:
            share = self._share(who)
            if not unpaced:
                now = self._now()
                share.tokens = min(BURST, share.tokens + (now - share.at) * RATE_PER_S)
                share.at = now
                if share.tokens < 1:
                    wait = (1 - share.tokens) / RATE_PER_S
                    raise TooMany(f"this token sent over {RATE_PER_S:g} requests a second", wait)
            if share.open >= limit:
                raise TooMany(f"this token already has {limit} requests open at once", 1.0)
            if not unpaced:
                share.tokens -= 1
            share.open += 1
        return lambda: self._release(share, "open")

    def long_poll(self, who: str) -> Callable[[], None]:
        """Count one long poll of `who`'s; the call that releases it."""
        with self._lock:
            share = self._share(who)
            if share.long_polls >= MAX_LONG_POLLS:
                raise TooMany(f"this token already waits on {MAX_LONG_POLLS} jobs at once", 1.0)
            share.long_polls += 1
        return lambda: self._release(share, "long_polls")

    def job(self, who: str) -> Callable[[], None]:
        """Count one job of `who`'s, running or waiting; the call that releases it."""
        with self._lock:
            share = self._share(who)
            if share.jobs >= MAX_JOBS:
                raise TooMany(f"this token already has {MAX_JOBS} jobs running or waiting", 2.0)
            share.jobs += 1
        return lambda: self._release(share, "jobs")

    def _release(self, share: _Share, counter: str) -> None:
        with self._lock:
            setattr(share, counter, getattr(share, counter) - 1)
