"""Where the broker is, and the names of what owners and workers keep in Redis.

Every key a send leaves is keyed by its ticket, `{item idempotency key}:{attempt}`:
the same attempt of the same item is the same ticket whoever sends it, so a task
delivered twice, or an owner that resumes a run after a crash, finds the first
answer instead of sending again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"
#: The Celery queue chunks go to unless an endpoint names its own.
DEFAULT_QUEUE = "promptlab"


#: Seconds a claim and a stored answer are kept: as long as a run may be left to resume
#: without sending again what was answered (PROMPTLAB_ANSWER_TTL_S; about 2 KB each).
def _seconds(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


ANSWER_TTL_S = _seconds("PROMPTLAB_ANSWER_TTL_S", 24 * 3600)
#: Seconds a worker's heartbeat lives; it is renewed every third of that.
HEARTBEAT_TTL_S = 6.0
#: Seconds an unacknowledged task waits before the broker delivers it again (a worker
#: killed mid-task): claims and stored answers make the second delivery send nothing
#: already answered.
DEFAULT_VISIBILITY_TIMEOUT_S = 300


def broker_url(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("PROMPTLAB_BROKER_URL") or DEFAULT_BROKER_URL


def visibility_timeout_s() -> int:
    return _seconds("PROMPTLAB_VISIBILITY_TIMEOUT_S", DEFAULT_VISIBILITY_TIMEOUT_S)


def claim_key(ticket: str) -> str:
    """The seed's scheme: `idempotent:{task}:{item}`, valued with who sends it."""
    return f"idempotent:send:{ticket}"


def answer_key(ticket: str) -> str:
    return f"promptlab:answer:{ticket}"


def ready_key(ticket: str) -> str:
    """Pushed once the ticket's answer is stored: a worker waiting on it wakes then."""
    return f"promptlab:ready:{ticket}"


def replies_key(owner: str) -> str:
    """The list an owner reads its answers from, one JSON line per ticket."""
    return f"promptlab:replies:{owner}"


def owner_key(owner: str) -> str:
    """Kept by a live owner: gone, Redis lost its data (promptlab/distributed/dispatch.py)."""
    return f"promptlab:owner:{owner}"


def heartbeat_key(sender: str) -> str:
    return f"promptlab:alive:{sender}"
