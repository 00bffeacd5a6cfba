"""What fakellm's control routes read and steer: Stats, the counts `GET /_stats`
answers, and AnswerGate, which `POST /_gate` moves to hold answers back.

Apart from app.py because neither touches the simulated APIs: they are the tests' and
benches' view of the server (how many attempts, faults, completions), and their hold on it.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Stats:
    """What the server has seen since start (or the last reset)."""

    attempts: int = 0
    successes: int = 0
    rate_limited: int = 0
    quota: int = 0
    server_errors: int = 0
    timeouts: int = 0
    resets: int = 0
    bad_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    tokens_admitted: int = 0
    #: When the first request arrived and the last one was answered (epoch seconds, the
    #: system's wall clock, so a bench can set them against a process it started).
    first_request_at: float | None = None
    last_answered_at: float | None = None
    completed_ids: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        counts = data.pop("completed_ids")
        twice = {rid: n for rid, n in counts.items() if n > 1}
        data["completed_twice"] = len(twice)
        data["duplicate_completions"] = sum(n - 1 for n in twice.values())
        data["duplicate_ids"] = sorted(twice)[:100]
        return data


class AnswerGate:
    """Holds requests past a number: those that arrived before it are answered, later
    ones wait (in flight) until it moves. Open (no number) unless a test sets one with
    `POST /_gate`: it then knows exactly how many answers went out, however fast the
    machine, and can keep requests in flight for as long as it needs."""

    def __init__(self) -> None:
        self.answer_below: int | None = None
        self.arrived = 0
        self.held = 0
        self._moved = asyncio.Condition()

    def _passes(self, number: int) -> bool:
        return self.answer_below is None or number < self.answer_below

    async def through(self) -> None:
        """Wait until this request, numbered by arrival, may be answered."""
        number = self.arrived
        self.arrived += 1
        if self._passes(number):
            return
        self.held += 1
        try:
            async with self._moved:
                await self._moved.wait_for(lambda: self._passes(number))
        finally:
            self.held -= 1

    async def move(self, answer_below: int | None) -> None:
        self.answer_below = answer_below
        async with self._moved:
            self._moved.notify_all()
