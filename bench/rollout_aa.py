"""The guarded rollout's A/A and power simulation: how often its decision rule
(promptlab/analysis/rollout.py: `look` then `decide` at every batch) kills a variant
that is no worse than control, and how soon it kills one that is.

    PYTHONPATH=. .venv/bin/python bench/rollout_aa.py [--rollouts 1000]

Each rollout runs as the server would (promptlab/facades/rollouts.py): units arrive in
batches of BATCH per arm, every batch is a look at every guardrail, the stages are 1,
5, 25, 50 and 100% with `min_units_per_stage` units per arm each (this stage's, the
fewer arm's) before a stage may advance, and on_regression is kill. The guardrails are
the issue's: error_rate worse by 0.02, latency_p90_ms by 300, ctr by 0.01. The mixture
is tuned to the units per arm the whole rollout plans, every stage's minimum with the
last (100%) included: `Plan.planned_units`, 1,000 for the issue's 200 a stage (the
server's default too). Traffic is clustered per unit: a unit makes 1 to 5 calls, each
failing with the arm's error rate; a unit has a latency scale of its own (lognormal)
around which its succeeded calls vary (lognormal), and a click propensity of its own
(Beta), each succeeded call an impression clicked with it. The simplification: both
arms get BATCH units a batch whatever the stage (a real control arm gets more at the
early stages, which only narrows the sequences).

Prints, side by side in one run, for the issue's plan (200 units a stage) and one with
400: the share of rollouts killed for identical variants (the false-kill rate, budget
5%), for a variant worse by exactly the tolerance (error 2% -> 4%: the edge of the
rule's null, budget 5% too), and for a variant 5 points worse on error rate (2% -> 7%),
with the share killed at a look before half the planned units per arm (strictly fewer)
and the median units per arm at the kill. About 2 minutes on 2 cores at 1,000 rollouts
a figure. Not a test: it asserts nothing; tests/test_rollout_rule.py runs 200 rollouts
of each case on the issue's plan and asserts bounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from promptlab.analysis.rollout import ERROR_RATE, Guardrail, decide, look  # noqa: E402
from promptlab.records.unit_samples import CTR, ArmSample, RatioSample  # noqa: E402

BATCH = 50
GUARDRAILS = (
    Guardrail("error_rate", 0.02),
    Guardrail("latency_p90_ms", 300),
    Guardrail("ctr", 0.01),
)


@dataclass(frozen=True)
class Plan:
    """A rollout's stages and guardrails, as its `rollout:` block says them."""

    stages: tuple[int, ...] = (1, 5, 25, 50, 100)
    min_units_per_stage: int = 200
    guardrails: tuple[Guardrail, ...] = GUARDRAILS

    @property
    def planned_units(self) -> int:
        """Units per arm the rollout plans: every stage's minimum, the last (100%) too."""
        return len(self.stages) * self.min_units_per_stage


#: The issue's example.
PLAN = Plan()


@dataclass(frozen=True)
class Behaviour:
    """How one arm's units behave."""

    error_rate: float = 0.02
    ctr: float = 0.10
    #: Beta concentration (a + b) of units' click propensity: lower, units differ more.
    ctr_concentration: float = 10.0
    latency_median_ms: float = 800.0
    latency_unit_sigma: float = 0.5
    latency_call_sigma: float = 0.4


@dataclass(frozen=True)
class Traffic:
    """An arm's units in arrival order: per unit sums, and the latencies of succeeded
    calls with each one's unit (ascending)."""

    calls: Any
    errors: Any
    impressions: Any
    clicks: Any
    latency: Any
    latency_unit: Any


def draw(behaviour: Behaviour, units: int, rng: Any) -> Traffic:
    """`units` units of an arm, clustered: calls, failures, latency and clicks per unit."""
    import numpy as np

    calls = rng.integers(1, 6, units)
    unit = np.repeat(np.arange(units), calls)
    failed = rng.random(unit.size) < behaviour.error_rate
    scale = behaviour.latency_median_ms * rng.lognormal(0, behaviour.latency_unit_sigma, units)
    latency = scale[unit] * rng.lognormal(0, behaviour.latency_call_sigma, unit.size)
    mean, concentration = behaviour.ctr, behaviour.ctr_concentration
    propensity = rng.beta(mean * concentration, (1 - mean) * concentration, units)
    clicked = ~failed & (rng.random(unit.size) < propensity[unit])

    def summed(values: Any) -> Any:
        return np.bincount(unit, weights=values, minlength=units).astype(np.float64)

    return Traffic(
        calls=calls.astype(np.float64),
        errors=summed(failed),
        impressions=summed(~failed),
        clicks=summed(clicked),
        latency=latency[~failed],
        latency_unit=unit[~failed].astype(np.int64),
    )


def arm_sample(name: str, traffic: Traffic, units: int) -> ArmSample:
    """The arm's first `units` units as the server reads them."""
    import numpy as np

    timed = int(np.searchsorted(traffic.latency_unit, units))
    return ArmSample(
        name=name,
        units=units,
        requests=int(traffic.calls[:units].sum()),
        unitless=0,
        rates={
            ERROR_RATE: RatioSample(traffic.errors[:units], traffic.calls[:units]),
            CTR: RatioSample(traffic.clicks[:units], traffic.impressions[:units]),
        },
        latency=traffic.latency[:timed],
        latency_unit=traffic.latency_unit[:timed],
    )


@dataclass(frozen=True)
class Outcome:
    """How a rollout ended (`kill` or `complete`) and its units per arm then."""

    action: str
    units: int
    stage: int


def rollout(control: Behaviour, variant: Behaviour, rng: Any, plan: Plan = PLAN) -> Outcome:
    """One rollout, looked at after every batch until it is killed or completes."""
    planned = plan.planned_units
    a, b = draw(control, planned, rng), draw(variant, planned, rng)
    stage, in_stage, units = 0, 0, 0
    while units < planned:
        units, in_stage = units + BATCH, in_stage + BATCH
        looks = look(
            arm_sample("control", a, units),
            arm_sample("variant", b, units),
            plan.guardrails,
            planned,
        )
        decision = decide(looks, stage, plan.stages, in_stage, plan.min_units_per_stage, "kill")
        if decision.action in ("kill", "complete"):
            return Outcome(decision.action, units, stage)
        if decision.action == "advance":
            stage, in_stage = stage + 1, 0
    return Outcome("unfinished", units, stage)


@dataclass(frozen=True)
class Summary:
    rollouts: int
    killed: float
    #: Killed at a look before half the planned units per arm were in.
    killed_before_half: float
    #: Units per arm at the kill, the median over killed rollouts (None: none killed).
    median_units_at_kill: float | None


def simulate(
    rollouts: int, control: Behaviour, variant: Behaviour, seed: int, plan: Plan = PLAN
) -> Summary:
    """`rollouts` seeded rollouts of `variant` against `control`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    outcomes = [rollout(control, variant, rng, plan) for _ in range(rollouts)]
    kills = [o.units for o in outcomes if o.action == "kill"]
    early = [units for units in kills if units < plan.planned_units / 2]
    median = statistics.median(kills) if kills else None
    return Summary(rollouts, len(kills) / rollouts, len(early) / rollouts, median)


#: What each figure simulates: its label, the variant's behaviour (control: Behaviour())
#: and its seed.
CASES = (
    ("A/A, identical variants", Behaviour(), 2026),
    ("error 2% -> 4% (at the margin)", Behaviour(error_rate=0.04), 11),
    ("error 2% -> 7% (5 points worse)", Behaviour(error_rate=0.07), 7),
)


def _report(label: str, found: Summary, seconds: float) -> None:
    median = "-" if found.median_units_at_kill is None else f"{found.median_units_at_kill:.0f}"
    print(
        f"    {label:32} killed {found.killed:6.1%}   before half {found.killed_before_half:6.1%}"
        f"   median units/arm at kill {median:>5}   ({found.rollouts} rollouts, {seconds:4.1f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="rollouts per figure")
    parser.add_argument(
        "--units-per-stage",
        type=int,
        nargs="+",
        default=[PLAN.min_units_per_stage, 400],
        help="min_units_per_stage of each plan simulated (the issue's 200, then 400)",
    )
    args = parser.parse_args()
    n = args.rollouts
    print(
        f"guardrails: {', '.join(f'{g.metric} worse by {g.worse_by:g}' for g in GUARDRAILS)};"
        f" on_regression kill; a look every {BATCH} units per arm; control: error 2%, "
        f"CTR 10%, latency median 800 ms"
    )
    started_all = time.perf_counter()
    for units in args.units_per_stage:
        plan = Plan(min_units_per_stage=units)
        print(
            f"  stages {', '.join(f'{s}%' for s in plan.stages)}, "
            f"{plan.min_units_per_stage} units per arm a stage: planned "
            f"{plan.planned_units} units per arm (half: {plan.planned_units // 2})"
        )
        for label, variant, seed in CASES:
            started = time.perf_counter()
            found = simulate(n, Behaviour(), variant, seed, plan)
            _report(label, found, time.perf_counter() - started)
    print(f"  ({time.perf_counter() - started_all:.0f} s in all)")


if __name__ == "__main__":
    main()
