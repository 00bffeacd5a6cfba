"""Guarded rollouts in DuckDB: each rollout's state, and its arms' live calls per unit.

`rollouts` holds one row per experiment with a rollout (migration 0025_rollouts): its
state (running, paused, held, killed, complete, aborted), when it and its current stage
started, and the last decision. The arms are the gateway's calls of the experiment's
variant and of its control since the rollout started (`production_logs` rows with
that experiment and variant, promptlab/store/live_calls.py), per unit, with the
feedback events about them and each unit's failed calls (`error rate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from promptlab.records.unit_samples import ArmSample
from promptlab.store.connection import Store
from promptlab.store.unit_samples import arm_from_logs

__all__ = ["Look", "RolloutRows", "RolloutState", "live_arm", "units_since"]

#: One check of a guardrail: when, the difference, and its confidence sequence.
Look = tuple[datetime, float, float, float]


@dataclass(frozen=True)
class RolloutState:
    experiment: str
    state: str
    started_at: datetime
    stage_started_at: datetime
    decided_at: datetime | None
    last_action: str | None
    reason: str | None


#: Checks whose guardrails a rollout keeps (at 5 s a check: the last 40 minutes).
MAX_LOOKS = 500

_COLUMNS = "experiment, state, started_at, stage_started_at, decided_at, last_action, reason"


class RolloutRows:
    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, experiment: str) -> RolloutState | None:
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_COLUMNS} FROM rollouts WHERE experiment = ?", [experiment]
            ).fetchone()
        return RolloutState(*row) if row else None

    def start(self, experiment: str, at: datetime) -> RolloutState:
        """The rollout's row, made running from `at` unless it exists already."""
        with self.store.transaction() as tx:
            tx.execute(
                "INSERT INTO rollouts (experiment, state, started_at, stage_started_at) "
                "VALUES (?, 'running', ?, ?) ON CONFLICT DO NOTHING",
                [experiment, at, at],
            )
        found = self.get(experiment)
        assert found is not None
        return found

    def set(
        self,
        experiment: str,
        state: str,
        action: str,
        reason: str,
        at: datetime,
        stage_started_at: datetime | None = None,
    ) -> None:
        """Record a decision (and, when a stage starts, when it did)."""
        with self.store.transaction() as tx:
            tx.execute(
                "UPDATE rollouts SET state = ?, last_action = ?, reason = ?, decided_at = ?, "
                "stage_started_at = coalesce(?, stage_started_at) WHERE experiment = ?",
                [state, action, reason[:2000], at, stage_started_at, experiment],
            )

    def add_looks(
        self, experiment: str, at: datetime, looks: Sequence[tuple[str, float, float, float]]
    ) -> None:
        """One check's judged guardrails (metric, effect, low, high); only the last
        MAX_LOOKS checks of a rollout are kept."""
        if not looks:
            return
        with self.store.transaction() as tx:
            tx.executemany(
                "INSERT INTO rollout_looks VALUES (?, ?, ?, ?, ?, ?)",
                [[experiment, at, *look] for look in looks],
            )
            tx.execute(
                "DELETE FROM rollout_looks WHERE experiment = $e AND looked_at < (SELECT "
                "min(looked_at) FROM (SELECT DISTINCT looked_at FROM rollout_looks "
                "WHERE experiment = $e ORDER BY looked_at DESC LIMIT $keep))",
                {"e": experiment, "keep": MAX_LOOKS},
            )

    def effects(self, experiment: str) -> dict[str, tuple[float, ...]]:
        """Each guardrail's effect at the kept checks, oldest first."""
        return {
            metric: tuple(look[1] for look in looks)
            for metric, looks in self.history(experiment).items()
        }

    def history(self, experiment: str) -> dict[str, tuple[Look, ...]]:
        """Each guardrail's kept checks, oldest first: when, the effect, its sequence."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT metric, looked_at, effect, low, high FROM rollout_looks "
                "WHERE experiment = ? ORDER BY metric, looked_at",
                [experiment],
            ).fetchall()
        history: dict[str, list[Look]] = {}
        for metric, at, effect, low, high in rows:
            history.setdefault(str(metric), []).append((at, float(effect), float(low), float(high)))
        return {metric: tuple(looks) for metric, looks in history.items()}


def live_arm(
    store: Store, experiment: str, variant: str, version_id: str, since: datetime
) -> ArmSample:
    """The variant's live calls in the experiment since `since`, per unit: completion,
    CTR, error rate and latency, with the feedback events about its version."""
    lines = "experiment = $experiment AND variant = $variant AND event_time >= $since"
    events = "prompt_version_id = $version AND event_time >= $since"
    params = {"experiment": experiment, "variant": variant, "version": version_id, "since": since}
    with store.read() as cur:
        return arm_from_logs(cur, variant, lines, events, params, errors=True)


def units_since(store: Store, experiment: str, variant: str, since: datetime) -> int:
    """Distinct units the variant served in the experiment since `since`."""
    with store.read() as cur:
        row = cur.execute(
            "SELECT count(DISTINCT unit_id) FROM production_logs "
            "WHERE experiment = ? AND variant = ? AND event_time >= ?",
            [experiment, variant, since],
        ).fetchone()
    return int(row[0]) if row else 0
