"""A run stops when a lane is refused systematically: its first requests all answered
with the same `bad_request` (say, two parameters a model takes only one of), every
other item would be sent into the same 400, billed or not, for nothing."""

from __future__ import annotations

from promptlab.errors import ErrorKind, ProviderError

#: Outcomes that say nothing of the request: the server was busy or did not answer.
_NO_ANSWER = frozenset(
    {ErrorKind.RATE_LIMIT, ErrorKind.OVERLOADED, ErrorKind.TIMEOUT, ErrorKind.CONNECTION}
)
#: A lane whose first this many answered attempts were all refused with one and the same
#: `bad_request` message stops the run with that message, as an auth error does.
SYSTEMATIC_REFUSALS = 20


class RefusalWatch:
    """Per lane, whether its first attempts are all the same refusal (throttles and
    timeouts are no answer to the request itself: they neither count nor clear it)."""

    def __init__(self, limit: int = SYSTEMATIC_REFUSALS) -> None:
        self.limit = limit
        self._counts: dict[str, tuple[str, int]] = {}
        #: Lanes that got anything else first: the refusals, if any, are the items'.
        self._cleared: set[str] = set()

    def observe(self, lane: str, error: ProviderError | None) -> str | None:
        """Take one attempt's outcome (None: it was answered); return the message when
        the lane's first `limit` attempts were all refused with it."""
        if lane in self._cleared:
            return None
        if error is not None and error.kind in _NO_ANSWER:
            return None
        if error is None or error.kind is not ErrorKind.BAD_REQUEST:
            self._cleared.add(lane)
            return None
        message = error.provider_message
        first, count = self._counts.get(lane, (message, 0))
        if message != first:
            self._cleared.add(lane)
            return None
        self._counts[lane] = (first, count + 1)
        if count + 1 < self.limit:
            return None
        self._cleared.add(lane)  # said once: the run stops
        return message
