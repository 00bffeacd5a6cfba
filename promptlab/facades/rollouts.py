"""`wb.rollouts`: guarded rollouts, checked and moved along their stages.

An experiment whose latest revision carries `rollout:` (promptlab/experiments/
rollout.py) is checked by its server every few seconds (server/periodic.py): the
variant's and control's live calls since the rollout started, per unit, against each
guardrail (the rule: promptlab/analysis/rollout.py). A decision moves the experiment
by a new revision, as a person would: the ramp to the next stage, the kill switch on a
regression, the label `production` to the variant's version at the end. Each decision
is a `rollout.decision` event in the audit trail with the figures behind it. A person
may pause, resume or abort a rollout (abort is the kill switch, for good).
"""

from __future__ import annotations

import builtins  # `list` below names a method: annotations say builtins.list
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from promptlab.analysis.rollout import Decision, Guardrail, GuardrailLook, decide, look
from promptlab.audit.actor import acting_as
from promptlab.errors import ExperimentError
from promptlab.experiments import ExperimentConfig
from promptlab.experiments.rollout import RolloutPlan, rollout_plan
from promptlab.facades.context import Context
from promptlab.facades.experiments import Experiments
from promptlab.facades.prompts import Prompts
from promptlab.observability.webhooks import post_json
from promptlab.store.rollouts import Look, RolloutRows, RolloutState, live_arm, units_since

__all__ = ["GuardrailRow", "RolloutStatus", "Rollouts"]

log = logging.getLogger(__name__)

#: States a rollout is checked in; the others wait for a person.
CHECKED = ("running",)
#: What each state allows a person to do next.
_MOVES = {
    "pause": ("running",),
    "resume": ("paused", "held"),
    "abort": ("running", "paused", "held"),
}


@dataclass(frozen=True)
class GuardrailRow:
    """One guardrail at the last look: each arm's value, the difference (variant minus
    control) and its confidence sequence, and whether it regressed."""

    metric: str
    worse_by: float
    control: float | None
    variant: float | None
    effect: float | None
    low: float | None
    high: float | None
    regressed: bool
    line: str
    #: The difference at the last checks (at most 500), oldest first: its line over time.
    effects: tuple[float, ...] = ()
    #: Those checks whole: when, the difference, its confidence sequence (low, high).
    history: tuple[Look, ...] = ()


@dataclass(frozen=True)
class RolloutStatus:
    experiment: str
    revision: int
    variant: str
    state: str
    #: The stage the ramp is at (0-based) and its percent; None: off the stages.
    stage: int | None
    ramp: float
    stages: tuple[float, ...]
    killed: bool
    min_units_per_stage: int
    #: Units per arm since the rollout started, and since this stage did (the fewer arm).
    units_control: int
    units_variant: int
    stage_units: int
    started_at: datetime
    stage_started_at: datetime
    last_action: str | None
    reason: str | None
    guardrails: tuple[GuardrailRow, ...]


class Rollouts:
    """Check rollouts and move them; pause, resume and abort them."""

    def __init__(self, context: Context, experiments: Experiments, prompts: Prompts) -> None:
        self._context = context
        self._experiments = experiments
        self._prompts = prompts
        self._rows = RolloutRows(context.store)

    def list(self) -> builtins.list[RolloutStatus]:
        """Every experiment whose latest revision has a rollout, by name."""
        return [self._status(c)[0] for c in self._experiments.list() if c.rollout is not None]

    def status(self, name: str) -> RolloutStatus:
        return self._status(self._config(name))[0]

    def check_all(self) -> builtins.list[tuple[str, Decision]]:
        """Check every running rollout once; the decisions that moved something."""
        moved = []
        for config in self._experiments.list():
            if config.rollout is None:
                continue
            try:
                decision = self.check(config.name)
            except Exception:  # noqa: BLE001 - one rollout's failure stops no other
                log.exception("checking the rollout of %s failed", config.name)
                continue
            if decision is not None and decision.action != "wait":
                moved.append((config.name, decision))
        return moved

    def check(self, name: str) -> Decision | None:
        """Look at the rollout's guardrails now and act on the decision; None when the
        rollout is not running (paused, held, ended) or its ramp is off its stages."""
        config = self._config(name)
        status, plan, looks = self._status(config)
        if status.state not in CHECKED or status.stage is None:
            return None
        decision = decide(
            looks,
            status.stage,
            plan.stages,
            status.stage_units,
            plan.min_units_per_stage,
            plan.on_regression,
        )
        judged = [
            (f.metric, f.effect, f.interval.low, f.interval.high)
            for f in looks
            if f.effect is not None and f.interval is not None
        ]
        self._rows.add_looks(name, self._context.store.clock.now(), judged)
        if decision.action != "wait":
            self._apply(config, plan, status, decision)
        return decision

    def pause(self, name: str, note: str = "") -> RolloutStatus:
        return self._move(name, "pause", "paused", note)

    def resume(self, name: str, note: str = "") -> RolloutStatus:
        return self._move(name, "resume", "running", note)

    def abort(self, name: str, note: str = "") -> RolloutStatus:
        """Every unit to control (the kill switch), and the rollout ends."""
        config = self._config(name)
        self._experiments.update(name, killed=True, note=note or "rollout aborted")
        return self._move(config.name, "abort", "aborted", note)

    # ---- internals -------------------------------------------------------------------

    def _config(self, name: str) -> ExperimentConfig:
        config = self._experiments.get(name)
        if config.rollout is None:
            raise ExperimentError(f"experiment {name!r} has no rollout (add `rollout:` to it)")
        return config

    def _state(self, config: ExperimentConfig) -> RolloutState:
        found = self._rows.get(config.name)
        if found is None:
            found = self._rows.start(config.name, config.created_at)
        return found

    def _status(
        self, config: ExperimentConfig
    ) -> tuple[RolloutStatus, RolloutPlan, builtins.list[GuardrailLook]]:
        plan = rollout_plan(config.rollout)
        assert plan is not None
        state = self._state(config)
        control, variant = config.control, config.variant(plan.variant)
        store = self._context.store
        arms = [
            live_arm(store, config.name, v.name, v.prompt_version_id or "", state.started_at)
            for v in (control, variant)
        ]
        planned = config.planned_units or plan.min_units_per_stage * len(plan.stages)
        guardrails = [Guardrail(g.metric, g.worse_by) for g in plan.guardrails]
        looks = look(arms[0], arms[1], guardrails, planned)
        stage_units = min(
            units_since(store, config.name, v.name, state.stage_started_at)
            for v in (control, variant)
        )
        current = "killed" if config.killed and state.state in CHECKED else state.state
        history = self._rows.history(config.name)
        status = RolloutStatus(
            experiment=config.name,
            revision=config.revision,
            variant=plan.variant,
            state=current,
            stage=plan.stage_of(config.ramp),
            ramp=config.ramp,
            stages=plan.stages,
            killed=config.killed,
            min_units_per_stage=plan.min_units_per_stage,
            units_control=arms[0].units,
            units_variant=arms[1].units,
            stage_units=stage_units,
            started_at=state.started_at,
            stage_started_at=state.stage_started_at,
            last_action=state.last_action,
            reason=state.reason,
            guardrails=tuple(_row(found, history.get(found.metric, ())) for found in looks),
        )
        return status, plan, looks

    def _apply(
        self, config: ExperimentConfig, plan: RolloutPlan, status: RolloutStatus, decision: Decision
    ) -> None:
        """Move the experiment as the decision says, by the rollout's own hand."""
        name, now = config.name, self._context.store.clock.now()
        note = f"rollout: {decision.action}: {decision.reason}"
        state, stage_started = status.state, None
        with acting_as(f"rollout of {name}"):
            if decision.action == "advance":
                assert status.stage is not None
                self._experiments.update(name, ramp=plan.stages[status.stage + 1], note=note)
                stage_started = now
            elif decision.action == "kill":
                self._experiments.update(name, killed=True, note=note)
                state = "killed"
            elif decision.action == "hold":
                state = "held"
            elif decision.action == "complete":
                if plan.on_complete == "promote":
                    self._promote(config, plan)
                state = "complete"
            self._rows.set(name, state, decision.action, decision.reason, now, stage_started)
            self._decided(
                plan,
                {
                    "experiment": name,
                    "action": decision.action,
                    "reason": decision.reason,
                    "stage": status.stage,
                    "ramp": status.ramp,
                    "units": {"control": status.units_control, "variant": status.units_variant},
                    "guardrails": [row.line for row in status.guardrails],
                },
            )

    def _decided(self, plan: RolloutPlan, payload: dict[str, Any]) -> None:
        """A decision in the audit trail, and posted where the plan says (if allowed)."""
        self._context.audit_change("rollout.decision", self._context.author(), payload)
        if plan.on_decision_url:
            post_json(plan.on_decision_url, payload, self._context.settings.webhook_hosts)

    def _promote(self, config: ExperimentConfig, plan: RolloutPlan) -> None:
        variant = config.variant(plan.variant)
        prompt = (variant.prompt or "").split("@", 1)[0]
        if variant.prompt_version_id and prompt:
            self._prompts.set_label(prompt, variant.prompt_version_id, "production")

    def _move(self, name: str, action: str, state: str, note: str) -> RolloutStatus:
        config = self._config(name)
        current = self._state(config).state
        if current not in _MOVES[action]:
            raise ExperimentError(
                f"the rollout of {name} is {current}: it cannot {action} "
                f"(only a rollout {' or '.join(_MOVES[action])} can)"
            )
        now = self._context.store.clock.now()
        reason = note or f"{action} by {self._context.author()}"
        self._rows.set(name, state, action, reason, now, now if action == "resume" else None)
        plan = rollout_plan(config.rollout)
        assert plan is not None
        self._decided(plan, {"experiment": name, "action": action, "reason": reason})
        return self.status(name)


def _row(found: GuardrailLook, history: tuple[Look, ...]) -> GuardrailRow:
    interval = found.interval
    return GuardrailRow(
        metric=found.metric,
        worse_by=found.worse_by,
        control=found.control,
        variant=found.variant,
        effect=found.effect,
        low=interval.low if interval is not None else None,
        high=interval.high if interval is not None else None,
        regressed=found.regressed,
        line=found.line,
        effects=tuple(look[1] for look in history),
        history=history,
    )
