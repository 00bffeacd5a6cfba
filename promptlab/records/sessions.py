"""A replayed conversation log's results per session (per variant of the run), and the
context shards its sessions were cut into."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

#: The key of a replayed turn's row holding its session (promptlab/conversations/replay.py
#: writes it; the engine, the store and the views read it).
SESSION_KEY = "__session__"


@dataclass(frozen=True)
class SessionTurn:
    """One finished turn of a replayed session, as a variant answered it."""

    key: str
    row_index: int
    status: str
    attempts: int
    #: The user's message (the log's content column), or None when the log is gone.
    user: str | None
    output: str | None
    error: str | None
    #: The context shard it was sent with (its seq_no from 0; None: its history fit
    #: whole, or the shard expired) and that shard's id (None: fit whole).
    shard: int | None = None
    shard_id: str | None = None


@dataclass(frozen=True)
class SessionMetrics:
    variant: str
    sessions: int
    #: Sessions whose every turn completed (succeeded and passed its checks).
    completed: int
    turns_per_session: float
    #: A session's latency: its turns' latencies summed (sessions with every turn timed).
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    #: Each scorer's mean over sessions of the session's mean score.
    scores: Mapping[str, float] = field(default_factory=dict)

    @property
    def completion(self) -> float | None:
        return self.completed / self.sessions if self.sessions else None


@dataclass(frozen=True)
class ShardRecord:
    shard_id: str
    run_id: str
    session_id: str
    variant: str
    repeat: int
    seq_no: int
    #: The last shard stored for its session (so far, while the run goes on).
    is_final: bool
    #: Its first and last message, as indexes in the session's history (from 0).
    first_message: int
    last_message: int
    tokens: int
    #: Why the shard before it ended where this one starts (conversations/shards.py).
    cut: str
    #: The summary of the shards before it, carried into this one (None: none asked).
    summary: str | None
    summary_version_id: str | None
    summary_tokens: int | None
    summary_cost_usd: float | None
    created_at: datetime
    expires_at: datetime
