"""A guarded rollout's decision rule: at every new batch of units, is any guardrail shown
worse, and may the variant's stage advance?

A rollout runs one variant against control and raises the variant's share in stages
(1%, 5%, 25%, ...). Each guardrail (error rate, latency p90, CTR) names how much worse
the variant may be, `worse_by`, in the metric's own units (a share for a rate, ms for
latency). The server looks at every new batch of units, so a fixed-horizon test would
be peeked at dozens of times and kill good variants far more often than its level
says (bench/aa.py measures what peeking does). Each guardrail's effect (variant minus
control, per unit: the delta method of promptlab/analysis/units.py) therefore gets an
always-valid confidence sequence, the mSPRT's of promptlab/analysis/sequential.py,
its mixture tuned to the rollout's planned units per arm. A guardrail has *regressed*
when its whole confidence sequence lies on the worse side beyond `worse_by`: the
variant is worse than control by more than the tolerance, with the family's confidence,
not merely worse by some amount. However many looks are taken, the chance that any of
them does so by chance stays within the budget below.

The guardrails are one family: ROLLOUT_ALPHA (5%) is the chance, over every look and
every guardrail together, of killing a variant that is no worse than allowed. Each
guardrail's sequence is at confidence 1 - ROLLOUT_ALPHA / len(guardrails) (Bonferroni:
a union bound, valid however the metrics correlate); the sequence is two-sided, and
only its worse side can kill, so the one-sided budget used is smaller still.

`decide` turns the looks into one action: any regression -> the rollout's
`on_regression` (kill or hold); else, once the stage holds `min_units_per_stage` units
in each arm, advance (or complete at the last stage); else wait.

What it costs (bench/rollout_aa.py, the rule as the server runs it, a look every 50
units per arm): identical variants are killed in 0 of 1,000 rollouts, a variant worse
by exactly its tolerance in at most 1 of 1,000: the budget is far from spent, since a
kill needs the sequence beyond `worse_by`, not merely beyond 0. The price is time: a
variant 5 points worse on error rate (2% -> 7%, tolerance 0.02) is killed in 99% of
rollouts, at a median of about 400 units per arm, which with the issue's 200 units a
stage (1,000 planned) is before half the plan in only 67%; with 400 a stage (2,000
planned) it is 99%. Pure: no store, no server.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from promptlab.analysis.sequential import always_valid, tuned_width
from promptlab.analysis.stats import MIN_UNITS_PER_ARM, Interval
from promptlab.analysis.units import Estimate, linearized, quantile_difference, rate_difference
from promptlab.records.unit_samples import CTR, ERROR_RATE, ArmSample, RatioSample

#: The metrics a guardrail may watch.
GUARDRAIL_METRICS = ("error_rate", "latency_p90_ms", "ctr")
#: Guardrail metrics that are worse when lower (the others are worse when higher).
LOWER_IS_WORSE = frozenset({"ctr"})
#: The rate each rate guardrail reads from `ArmSample.rates`.
RATE_OF = {"error_rate": ERROR_RATE, "ctr": CTR}
#: The latency percentile `latency_p90_ms` compares.
LATENCY_QUANTILE = 0.9
#: The family's false-kill budget over every look and every guardrail.
ROLLOUT_ALPHA = 0.05
#: Fewer units than this in an arm and a guardrail is not judged yet (as `compare`'s
#: rows: the normal approximations need units, not calls).
MIN_UNITS_TO_JUDGE = MIN_UNITS_PER_ARM
#: What `decide` may answer, and what a regression may do.
ACTIONS = ("wait", "advance", "hold", "kill", "complete")
ON_REGRESSION = ("kill", "hold")


@dataclass(frozen=True)
class Guardrail:
    """A metric the variant may not be worse on by more than `worse_by` (a share for a
    rate, ms for latency)."""

    metric: str
    worse_by: float

    def __post_init__(self) -> None:
        if self.metric not in GUARDRAIL_METRICS:
            known = ", ".join(GUARDRAIL_METRICS)
            raise ValueError(f"unknown guardrail metric {self.metric!r} (known: {known})")
        if not (math.isfinite(self.worse_by) and self.worse_by > 0):
            raise ValueError(f"{self.metric}: worse_by must be above 0, not {self.worse_by}")

    @property
    def lower_is_worse(self) -> bool:
        return self.metric in LOWER_IS_WORSE


@dataclass(frozen=True)
class GuardrailLook:
    """One guardrail at one look: each arm's value, the effect (variant - control), its
    confidence sequence (None while the metric has no data or too few units: `note`
    says which) and whether it regressed."""

    metric: str
    worse_by: float
    control: float | None
    variant: float | None
    effect: float | None
    interval: Interval | None
    #: Units per arm the metric was measured on: (control, variant).
    units: tuple[int, int]
    regressed: bool
    note: str = ""

    @property
    def line(self) -> str:
        """One human line, e.g. `error_rate +0.051 (CS +0.031 to +0.071) worse by more
        than 0.02: regressed`."""
        if self.interval is None or self.effect is None:
            return f"{self.metric}: not judged yet ({self.note or 'no data'})"
        shown = _figure(self.metric, self.effect)
        low, high = (
            _figure(self.metric, self.interval.low),
            _figure(self.metric, self.interval.high),
        )
        found = f"{self.metric} {shown} (CS {low} to {high})"
        tolerance = _tolerance(self.metric, self.worse_by)
        if self.regressed:
            return f"{found} worse by more than {tolerance}: regressed"
        return f"{found} not shown worse by more than {tolerance}"


def _figure(metric: str, value: float) -> str:
    return f"{value:+.0f}" if metric == "latency_p90_ms" else f"{value:+.3f}"


def _tolerance(metric: str, worse_by: float) -> str:
    return f"{worse_by:g} ms" if metric == "latency_p90_ms" else f"{worse_by:g}"


@dataclass(frozen=True)
class _Measured:
    """A guardrail's figures before its inference: None estimate when there is none."""

    control: float | None
    variant: float | None
    estimate: Estimate | None
    units: tuple[int, int]


def look(
    control: ArmSample, variant: ArmSample, guardrails: Sequence[Guardrail], planned_units: int
) -> list[GuardrailLook]:
    """Every guardrail at this look: its always-valid confidence sequence at confidence
    1 - ROLLOUT_ALPHA / len(guardrails), the mixture tuned to `planned_units` per arm,
    and whether it lies wholly on the worse side beyond `worse_by`."""
    if planned_units <= 0:
        raise ValueError(f"planned_units must be above 0, not {planned_units}")
    confidence = 1 - ROLLOUT_ALPHA / max(1, len(guardrails))
    return [
        _judged(guardrail, _measure(guardrail, control, variant), planned_units, confidence)
        for guardrail in guardrails
    ]


def _measure(guardrail: Guardrail, control: ArmSample, variant: ArmSample) -> _Measured:
    if guardrail.metric == "latency_p90_ms":
        return _latency(control, variant)
    name = RATE_OF[guardrail.metric]
    empty = _empty_ratio()
    a, b = control.rates.get(name, empty), variant.rates.get(name, empty)
    units = (int((a.den > 0).sum()), int((b.den > 0).sum()))
    value_a, value_b = linearized(a)[0], linearized(b)[0]
    return _Measured(
        None if math.isnan(value_a) else value_a,
        None if math.isnan(value_b) else value_b,
        rate_difference(a, b),
        units,
    )


def _empty_ratio() -> RatioSample:
    import numpy as np

    return RatioSample(np.zeros(0), np.zeros(0))


def _latency(control: ArmSample, variant: ArmSample) -> _Measured:
    """p90 latency of each arm and its difference, per unit (units that have a
    latency: a unit whose calls all failed has none)."""
    import numpy as np

    units = (_timed_units(control), _timed_units(variant))
    if not (control.latency.size and variant.latency.size):
        return _Measured(None, None, None, units)
    found = quantile_difference(
        (control.latency, control.latency_unit, control.units),
        (variant.latency, variant.latency_unit, variant.units),
        (LATENCY_QUANTILE,),
    )[0]
    value_a = float(np.quantile(control.latency, LATENCY_QUANTILE))
    return _Measured(value_a, value_a + found.estimate.effect, found.estimate, units)


def _timed_units(arm: ArmSample) -> int:
    """Units with at least one latency (cheaper than `np.unique` at every look)."""
    import numpy as np

    if not arm.latency_unit.size:
        return 0
    return int(np.count_nonzero(np.bincount(arm.latency_unit)))


def _judged(
    guardrail: Guardrail, measured: _Measured, planned_units: int, confidence: float
) -> GuardrailLook:
    """The guardrail's look from its figures: no interval without an estimate, with too
    few units or with no finite variance; else the confidence sequence and the verdict."""
    estimate, fewest = measured.estimate, min(measured.units)
    note = ""
    if estimate is None:
        note = "no data"
    elif fewest < MIN_UNITS_TO_JUDGE:
        note = f"too few units ({fewest}; a verdict needs {MIN_UNITS_TO_JUDGE} per arm)"
    elif not (math.isfinite(estimate.variance) and estimate.variance >= 0):
        note = "no measurable spread yet"
    base = GuardrailLook(
        metric=guardrail.metric,
        worse_by=guardrail.worse_by,
        control=measured.control,
        variant=measured.variant,
        effect=None if estimate is None else estimate.effect,
        interval=None,
        units=measured.units,
        regressed=False,
        note=note,
    )
    if note or estimate is None:
        return base
    units_now = sum(measured.units) / 2
    tau = tuned_width(estimate.variance, units_now, planned_units)
    interval = always_valid(estimate, tau, confidence).interval
    if guardrail.lower_is_worse:
        regressed = interval.high < -guardrail.worse_by
    else:
        regressed = interval.low > guardrail.worse_by
    return replace(base, interval=interval, regressed=regressed)


@dataclass(frozen=True)
class Decision:
    """What the rollout does after a look, and why (the reason names the figures)."""

    action: str
    reason: str
    looks: tuple[GuardrailLook, ...]


def decide(
    looks: Sequence[GuardrailLook],
    stage_index: int,
    stages: Sequence[float],
    units_per_arm: int,
    min_units_per_stage: int,
    on_regression: str,
) -> Decision:
    """The rollout's action: `on_regression` (kill or hold) when any guardrail regressed;
    else, once the stage holds `min_units_per_stage` units in each arm (`units_per_arm`:
    the fewer of both arms', this stage's), `advance` to the next stage or `complete` at
    the last one; else `wait`."""
    if on_regression not in ON_REGRESSION:
        raise ValueError(f"on_regression must be kill or hold, not {on_regression!r}")
    if not 0 <= stage_index < len(stages):
        raise ValueError(f"stage {stage_index} is not one of the {len(stages)} stages")
    kept = tuple(looks)
    regressed = [found for found in kept if found.regressed]
    if regressed:
        lines = "; ".join(found.line for found in regressed)
        return Decision(on_regression, f"{lines} -> {on_regression}", kept)
    share = stages[stage_index]
    where = f"stage {stage_index + 1} of {len(stages)} ({share:g}%)"
    held = f"{units_per_arm} of {min_units_per_stage} units per arm"
    if units_per_arm < min_units_per_stage:
        return Decision("wait", f"{where}: {held}, no guardrail regressed", kept)
    if stage_index + 1 < len(stages):
        after = stages[stage_index + 1]
        reason = f"{where}: {held}, no guardrail regressed -> {after:g}%"
        return Decision("advance", reason, kept)
    return Decision("complete", f"{where}, the last: {held}, no guardrail regressed", kept)
