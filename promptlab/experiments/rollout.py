"""A guarded rollout (`rollout:` in an experiment file): one variant's road from a few
percent of units to all of them, and what stops it.

```yaml
rollout:
  variant: concise
  stages: [1, 5, 25, 50, 100]        # the ramp's percent of units, raised only
  min_units_per_stage: 200           # per arm, before a stage may advance
  guardrails:
    - {metric: error_rate, worse_by: 0.02}
    - {metric: latency_p90_ms, worse_by: 300}
    - {metric: ctr, worse_by: 0.01}
  on_regression: kill                # kill (every unit to control) | hold
  on_complete: promote               # move the label `production` to the variant's version
  on_decision_url: https://hooks.example.com/rollouts   # optional: each decision posted
```

A stage is the experiment's ramp: a unit in stays in as it rises (buckets.py), and
units outside it get control. The server checks the guardrails as units arrive
(promptlab/facades/rollouts.py, the rule in promptlab/analysis/rollout.py) and moves the
ramp, the kill switch and the label by new revisions. Pure: parsing only, so a live
service importing promptlab.experiments pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptlab.errors import ExperimentError
from promptlab.observability.webhooks import url_problem

#: What a guardrail may watch, and in which direction it gets worse.
GUARDRAIL_WORSE_WHEN_HIGHER = {"error_rate": True, "latency_p90_ms": True, "ctr": False}
ON_REGRESSION = ("kill", "hold")
ON_COMPLETE = ("promote", "none")
MAX_STAGES = 20
MAX_GUARDRAILS = 10
_KEYS = frozenset(
    {
        "variant",
        "stages",
        "min_units_per_stage",
        "guardrails",
        "on_regression",
        "on_complete",
        "on_decision_url",
    }
)


@dataclass(frozen=True)
class GuardrailSpec:
    """One guardrail: the metric, and by how much worse the variant may be before it
    counts as a regression (a share for rates, milliseconds for latency)."""

    metric: str
    worse_by: float


@dataclass(frozen=True)
class RolloutPlan:
    variant: str
    stages: tuple[float, ...]
    min_units_per_stage: int
    guardrails: tuple[GuardrailSpec, ...]
    on_regression: str
    on_complete: str
    #: Where each decision is posted (promptlab/observability/webhooks.py: only to a
    #: host the server's PROMPTLAB_WEBHOOK_HOSTS allows).
    on_decision_url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        hook = {"on_decision_url": self.on_decision_url} if self.on_decision_url else {}
        return hook | {
            "variant": self.variant,
            "stages": [_number(s) for s in self.stages],
            "min_units_per_stage": self.min_units_per_stage,
            "guardrails": [{"metric": g.metric, "worse_by": g.worse_by} for g in self.guardrails],
            "on_regression": self.on_regression,
            "on_complete": self.on_complete,
        }

    def stage_of(self, ramp: float) -> int | None:
        """The index of the stage the ramp is at; None when it is at none."""
        return next((i for i, s in enumerate(self.stages) if abs(s - ramp) < 1e-9), None)


def parse_rollout(
    value: Any, variants: Sequence[tuple[str, bool]], ramp: float, where: str
) -> RolloutPlan | None:
    """`rollout:` checked whole against the experiment's variants ((name, control) each)
    and its ramp, which must be at one of the stages; ExperimentError names the field."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ExperimentError(f"{where}: expected a mapping (variant, stages, guardrails)")
    unknown = sorted(map(str, set(value) - _KEYS))
    if unknown:
        raise ExperimentError(f"{where}: unknown field(s) {', '.join(unknown)}")
    variant = _variant(value.get("variant"), variants, f"{where}.variant")
    stages = _stages(value.get("stages"), f"{where}.stages")
    if not any(abs(s - ramp) < 1e-9 for s in stages):
        shown = ", ".join(f"{_number(s)}" for s in stages)
        raise ExperimentError(
            f"{where}.stages: the ramp ({_number(ramp)}) must be one of the stages ({shown}): "
            "a rollout starts at a stage and moves the ramp along them"
        )
    return RolloutPlan(
        variant=variant,
        stages=stages,
        min_units_per_stage=_min_units(value.get("min_units_per_stage", 200), where),
        guardrails=_guardrails(value.get("guardrails"), f"{where}.guardrails"),
        on_regression=_choice(value, "on_regression", ON_REGRESSION, where),
        on_complete=_choice(value, "on_complete", ON_COMPLETE, where),
        on_decision_url=_hook(value.get("on_decision_url"), f"{where}.on_decision_url"),
    )


def rollout_plan(value: Mapping[str, Any] | None) -> RolloutPlan | None:
    """The plan a stored revision carries (already checked when it was saved)."""
    if value is None:
        return None
    return RolloutPlan(
        variant=str(value["variant"]),
        stages=tuple(float(s) for s in value["stages"]),
        min_units_per_stage=int(value["min_units_per_stage"]),
        guardrails=tuple(
            GuardrailSpec(str(g["metric"]), float(g["worse_by"])) for g in value["guardrails"]
        ),
        on_regression=str(value["on_regression"]),
        on_complete=str(value["on_complete"]),
        on_decision_url=value.get("on_decision_url"),
    )


def _hook(value: Any, where: str) -> str | None:
    if value is None:
        return None
    problem = url_problem(value) if isinstance(value, str) else "expected an address"
    if problem is not None:
        raise ExperimentError(f"{where}: {problem}")
    return str(value)


def _variant(value: Any, variants: Sequence[tuple[str, bool]], where: str) -> str:
    names = [name for name, control in variants if not control]
    if not isinstance(value, str) or value not in names:
        raise ExperimentError(
            f"{where}: expected one of the experiment's variants other than control "
            f"({', '.join(names)}), got {value!r}"
        )
    return value


def _stages(value: Any, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_STAGES:
        raise ExperimentError(f"{where}: expected a list of 1 to {MAX_STAGES} percentages")
    stages: list[float] = []
    for i, stage in enumerate(value):
        if isinstance(stage, bool) or not isinstance(stage, int | float) or not 0 < stage <= 100:
            raise ExperimentError(f"{where}[{i}]: expected a percentage over 0, at most 100")
        if abs(stage * 100 - round(stage * 100)) > 1e-9:
            raise ExperimentError(f"{where}[{i}]: at most two decimals (one bucket is 0.01%)")
        if stages and stage <= stages[-1]:
            raise ExperimentError(
                f"{where}[{i}]: stages only rise (a unit in stays in), got {_number(stage)} "
                f"after {_number(stages[-1])}"
            )
        stages.append(float(stage))
    return tuple(stages)


def _min_units(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000_000:
        raise ExperimentError(
            f"{where}.min_units_per_stage: expected a whole number from 1 to 10,000,000"
        )
    return value


def _guardrails(value: Any, where: str) -> tuple[GuardrailSpec, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_GUARDRAILS:
        raise ExperimentError(f"{where}: expected a list of 1 to {MAX_GUARDRAILS} guardrails")
    found: list[GuardrailSpec] = []
    for i, item in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(item, Mapping) or set(item) != {"metric", "worse_by"}:
            raise ExperimentError(f"{here}: expected {{metric: ..., worse_by: ...}}")
        metric, worse_by = item["metric"], item["worse_by"]
        if metric not in GUARDRAIL_WORSE_WHEN_HIGHER:
            known = ", ".join(GUARDRAIL_WORSE_WHEN_HIGHER)
            raise ExperimentError(f"{here}.metric: expected one of {known}, got {metric!r}")
        if any(g.metric == metric for g in found):
            raise ExperimentError(f"{here}.metric: {metric} is watched twice")
        if (
            isinstance(worse_by, bool)
            or not isinstance(worse_by, int | float)
            or not 0 < worse_by < float("inf")
        ):
            raise ExperimentError(f"{here}.worse_by: expected a number over 0, got {worse_by!r}")
        if metric != "latency_p90_ms" and worse_by >= 1:
            raise ExperimentError(f"{here}.worse_by: a rate's margin is a share under 1")
        found.append(GuardrailSpec(metric, float(worse_by)))
    return tuple(found)


def _choice(value: Mapping[str, Any], key: str, allowed: tuple[str, ...], where: str) -> str:
    chosen = value.get(key, allowed[0])
    if chosen not in allowed:
        raise ExperimentError(
            f"{where}.{key}: expected one of {', '.join(allowed)}, got {chosen!r}"
        )
    return str(chosen)


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value
