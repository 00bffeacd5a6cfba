"""Looks at data still arriving, and the final one: always valid until the planned horizon,
fixed-horizon at it, with the family's 5% split between the two.

Looking again and again at a fixed-horizon test inflates false positives (the A/A
harness measures it). While data is still arriving (a run not finished, production logs
unless `--final`) each look uses the mixture sequential probability ratio test (mSPRT) of
Johari, Pekelis and Walsh ("Always Valid Inference", 2017): for a normal estimate D of
variance V and a normal mixture of width tau over the effect,

    Lambda = sqrt(V / (V + tau^2)) * exp(tau^2 * D^2 / (2 V (V + tau^2)))

and p = min(1, 1 / Lambda), valid at every look; its confidence sequence excludes 0
exactly when p < alpha. The final look (a finished run, logs with `--final`) is one
fixed-horizon test. The two share the family's alpha: INTERIM_ALPHA for every interim
look together, FINAL_ALPHA for the final one, so whoever looked while the data came in,
the false-positive rate over all looks stays within FAMILY_ALPHA (a union bound). A
row's p is its test's own (the final look's is the textbook two-sided p); its adjusted
p carries the look's share (x5 for an interim look, x1.25 for the final) and Holm's
correction, so the 5% threshold applies to every adjusted p alike.

The mixture is tuned to the planned horizon, as GrowthBook's tuning parameter and Howard
et al.'s normal-mixture boundaries are: tau^2 is MIXTURE_RATIO times the variance the
estimate will have at the planned units per arm (today's variance scaled by units now /
units planned), the width that makes the confidence sequence narrowest there. The width
stays frozen at that value past the horizon: a width that shrank with the data as it
kept coming would no longer be one mixture, and an A/A that kept looking to 3x the
horizon called 1.33% of pairs against the 1% budget (0.73% frozen; bench/aa.py). Always
valid costs width: at the horizon an interim look needs about 3.6 standard errors where
the final fixed look at 4% needs 2.05, which is what finds most real lifts (bench/aa.py:
a +60% CTR lift, 81% over 20 looks against 83% for one fixed test alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from promptlab.analysis.stats import Interval
from promptlab.analysis.units import Estimate, Inference, fixed_horizon

#: The family's false-positive budget over every look, and its two shares.
FAMILY_ALPHA = 0.05
INTERIM_ALPHA = 0.01
FINAL_ALPHA = FAMILY_ALPHA - INTERIM_ALPHA
#: Units per arm the mixture is tuned to when nothing plans them (production logs
#: without `--planned-units`).
DEFAULT_PLANNED_UNITS = 1_000


def _narrowest_ratio(alpha: float) -> float:
    """tau^2 / V at which the mSPRT's confidence sequence is narrowest: the half-width
    squared is 2 V (1 + 1/r) (log(1/alpha) + log(1 + r) / 2), minimised over r."""
    level = math.log(1 / alpha)
    return min(
        (r / 10 for r in range(1, 1000)),
        key=lambda r: (1 + 1 / r) * (level + 0.5 * math.log1p(r)),
    )


#: The mixture's variance over the estimate's variance at the horizon (about 12 at 1%).
MIXTURE_RATIO = _narrowest_ratio(INTERIM_ALPHA)


@dataclass(frozen=True)
class Look:
    """Which look a comparison is: `interim` (data still arriving; always valid, tuned
    to `planned_units` per arm), `final` (the one fixed-horizon test after them), or
    `fixed` (a comparison nobody looks at while it fills: versions across runs)."""

    kind: str
    planned_units: int | None = None

    @property
    def sequential(self) -> bool:
        return self.kind == "interim"

    @property
    def alpha(self) -> float:
        """The share of the family's 5% this look may spend."""
        return {"interim": INTERIM_ALPHA, "final": FINAL_ALPHA}.get(self.kind, FAMILY_ALPHA)


FIXED = Look("fixed")
FINAL = Look("final")


def interim(planned_units: int | None) -> Look:
    return Look("interim", planned_units or DEFAULT_PLANNED_UNITS)


def infer(estimate: Estimate, look: Look, units_now: float) -> Inference:
    """The look's interval at its own level (1 - look.alpha) and its test's own p-value;
    `adjusted_p` scales it by the look's share."""
    if not look.sequential:
        return fixed_horizon(estimate, 1 - look.alpha)
    tau = tuned_width(estimate.variance, units_now, look.planned_units or DEFAULT_PLANNED_UNITS)
    return always_valid(estimate, tau, 1 - look.alpha)


def tuned_width(variance: float, units_now: float, planned_units: int) -> float:
    """The mixture's width tuned to the horizon: the variance there is today's scaled by
    the units (a per-unit mean's variance falls as 1/n), before the horizon and after it
    alike, so the width stays where the horizon put it however long the looks go on."""
    if not math.isfinite(variance) or variance <= 0 or units_now <= 0:
        return 0.0
    at_horizon = variance * units_now / planned_units
    return math.sqrt(MIXTURE_RATIO * at_horizon)


def always_valid(estimate: Estimate, tau: float, confidence: float = 0.95) -> Inference:
    """The always-valid p-value of effect 0 and the confidence sequence at this look."""
    d, v, t2 = estimate.effect, estimate.variance, tau * tau
    if not v > 0 or math.isinf(v) or not t2 > 0:
        certain = v == 0 and d != 0
        spread = 0.0 if v == 0 else math.inf
        return Inference(Interval(d - spread, d + spread), 0.0 if certain else 1.0)
    log_lambda = 0.5 * math.log(v / (v + t2)) + t2 * d * d / (2 * v * (v + t2))
    p = 1.0 if log_lambda <= 0 else math.exp(-log_lambda)
    alpha = 1 - confidence
    half = math.sqrt(2 * v * (v + t2) / t2 * (math.log(1 / alpha) + 0.5 * math.log((v + t2) / v)))
    return Inference(Interval(d - half, d + half), min(1.0, p))
