"""Who is acting: the person a change is recorded for, when it is not the process's author.

A process has one author (PROMPTLAB_AUTHOR). A server acts for many: each request runs
`acting_as` its token's principal (promptlab/server/principals.py), so what it changes
is theirs in the audit trail and on the versions it makes. The value lives in a context
variable, so each thread (and each request) sees its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_ACTOR: ContextVar[str | None] = ContextVar("promptlab_actor", default=None)
#: Longest actor name kept: it is stored on every change event.
MAX_ACTOR_CHARS = 200


def current_actor(default: str) -> str:
    """The person acting here, else `default` (the process's author)."""
    return _ACTOR.get() or default


@contextlib.contextmanager
def acting_as(actor: str | None) -> Iterator[None]:
    """Inside, changes are recorded for `actor` (None or empty: the process's author)."""
    # Stored on every change event: one printable line (no NUL, no newline).
    printable = "".join(ch for ch in (actor or "") if ch.isprintable())
    token = _ACTOR.set(printable.strip()[:MAX_ACTOR_CHARS] or None)
    try:
        yield
    finally:
        _ACTOR.reset(token)
