"""The statistics behind `promptlab compare`: rows, verdicts, Holm, SRM, sample size.

Pure functions over counts (no store); the effects per unit are in
promptlab/analysis/units.py. scipy is imported inside the functions that need its
distributions, so importing this module stays light.

Conventions: a difference is always B minus A (variant minus control); every test is
two-sided; intervals are at `confidence` (95% by default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import NormalDist

#: p-values below this (after Holm) may say better or worse.
ALPHA = 0.05
#: An SRM p-value below this is a sample-ratio mismatch: the split is broken.
SRM_THRESHOLD = 0.001
#: Fewer units than this in an arm and a row gives no verdict: the approximations behind
#: every method need units, not requests. Measured on the A/A harness's heavy-tailed
#: traffic, the table's false-positive rate is about 12% at 20 units per arm, 7-8% at
#: 100 and 3% at 600 (bench/aa.py).
MIN_UNITS_PER_ARM = 100
#: The same for an all-mode run, whose units are dataset rows seen by both variants:
#: paired and of equal size, they need fewer (the harness's paired A/A: bench/aa.py).
MIN_ROWS_PAIRED = 20
#: The SRM check judges a split once every arm should get this many units (a chi-square
#: needs expected counts, not the effects' normal approximations).
SRM_MIN_UNITS = 20
#: A latency percentile gets a verdict only with at least this many requests beyond it in
#: each arm (n * (1 - q)): p99 needs 2,000 requests an arm, p50 40.
MIN_TAIL_REQUESTS = 20


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    UNDECIDED = "not yet distinguishable"
    #: p < alpha on its own, but not once Holm adjusts for the table's other tests.
    UNADJUSTED = "significant before adjustment only"
    TOO_FEW = "too few units"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class SrmCheck:
    """Observed units per variant against the shares the split should give."""

    observed: dict[str, int]
    expected: dict[str, float]
    statistic: float
    p_value: float
    #: True when p < SRM_THRESHOLD: the assignment is broken, the comparison suspect.
    mismatch: bool
    #: False while an arm should get fewer than SRM_MIN_UNITS units (expected): the
    #: chi-square cannot tell a broken split from a lumpy one yet.
    judged: bool = True


@dataclass(frozen=True)
class MetricComparison:
    """One metric of one variant against control: what `promptlab compare` prints a row of."""

    metric: str
    variant: str
    control: str
    control_value: float | None
    variant_value: float | None
    #: Units per arm (each request counts as one when rows name no unit) ...
    n_control: int
    n_variant: int
    #: variant - control, in the metric's unit (a rate, or milliseconds).
    effect: float | None
    interval: Interval | None
    #: The test's own p-value (the textbook one at a fixed look; the always-valid one
    #: at an interim look).
    p_value: float
    #: The method the interval and the p-value both came from.
    test: str
    lower_is_better: bool
    #: The p on the family's scale (x 5% / look_alpha), Holm-adjusted across every
    #: comparison of one table; set by `holm_verdicts`.
    adjusted_p: float | None = None
    verdict: Verdict = Verdict.UNDECIDED
    #: ... and the requests behind them.
    requests_control: int = 0
    requests_variant: int = 0
    #: What one observation of the analysis is: `unit`, `request` (no row named a unit)
    #: or `row` (an all-mode run's pairs, clustered by dataset row).
    analysed_by: str = "unit"
    #: Each arm's own interval of its value (charts draw them).
    control_interval: Interval | None = None
    variant_interval: Interval | None = None
    #: Why the verdict is what it is, in words; set by `holm_verdicts`.
    reason: str = ""
    #: The share of variance CUPED removed, when it was used.
    variance_reduction: float | None = None
    #: The effect's standard error (the fixed-horizon one, also under mSPRT).
    standard_error: float | None = None
    #: The Bayesian view of the same estimate (promptlab/analysis/bayes.py): the chance
    #: the variant beats control, and the expected loss of choosing it, in the metric's
    #: unit; None where the row has no verdict to give (no data, too few units).
    chance_to_beat: float | None = None
    expected_loss: float | None = None
    #: The look's share of the family's 5% (5% a fixed look, 4% the final one, 1% every
    #: interim look together: promptlab/analysis/sequential.py); the interval's level.
    look_alpha: float = ALPHA


# ---- rates ---------------------------------------------------------------------------


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a proportion; (0, 1) when there is no observation."""
    if n <= 0:
        return Interval(0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n={n}, got {successes}")
    z = _z(confidence)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Rounding can put an end a hair outside [0, 1] or past p at the extremes.
    return Interval(max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p)))


# ---- many comparisons ----------------------------------------------------------------


def holm(p_values: Sequence[float], family: int | None = None) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given; `family`: the size of the
    declared family when some of its tests could not run (they count as p = 1)."""
    m = max(len(p_values), family or 0)
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):  # the untested ones sort last: ranks stay as they are
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _fmt(p: float) -> str:
    return "<0.0001" if p < 0.0001 else f"{p:.3g}"


def on_family_scale(c: MetricComparison) -> float:
    """A row's p on the family's scale: below 5% exactly when its own p is below its
    look's share, so Holm's correction treats every look alike."""
    return min(1.0, c.p_value * ALPHA / c.look_alpha)


def holm_verdicts(
    comparisons: Sequence[MetricComparison],
    alpha: float = ALPHA,
    family: Sequence[str] | None = None,
    variants: int = 1,
) -> list[MetricComparison]:
    """The comparisons with Holm-adjusted p-values, verdicts and the reason for each.

    The family is every row that ran a test: a row without data or with too few units
    ran none (its adjusted p stays None). With a declared `family` of metrics (compared
    for `variants` variants), the family is fixed at len(family) x variants whatever
    rows are given or could be tested (promptlab/records/family.py); a row of another
    metric is exploratory: no verdict. Each row's p is put on the family's scale first
    (its look's share: `on_family_scale`). A row is better or worse when its adjusted p
    is below alpha; its interval then excludes 0 on that side (interval and p come from
    one method). A row whose own p is below its look's share but not its adjusted one
    is "significant before adjustment only".
    """
    declared = None if family is None else set(family)
    tested = _tested(comparisons, declared)
    size = family_size(comparisons, family, variants)
    p_values = [on_family_scale(comparisons[i]) for i in tested]
    adjusted = dict(zip(tested, holm(p_values, size), strict=True))
    rows = []
    for index, c in enumerate(comparisons):
        outside = declared is not None and c.metric not in declared
        if outside and c.test != NO_DATA and c.verdict != Verdict.TOO_FEW:
            reason = f"exploratory: not a declared metric (p {_fmt(c.p_value)}, no verdict)"
            rows.append(replace(c, adjusted_p=None, verdict=Verdict.UNDECIDED, reason=reason))
            continue
        if index not in adjusted:
            reason = c.reason or "no data to compare"
            rows.append(replace(c, adjusted_p=None, reason=reason))
            continue
        p = adjusted[index]
        over = f"Holm over {size} test{'s' if size != 1 else ''}{_share(c, alpha)}"
        if p < alpha and c.interval is not None and c.interval.excludes_zero():
            up = c.interval.low > 0
            found = Verdict.WORSE if up == c.lower_is_better else Verdict.BETTER
            reason = f"adjusted p {_fmt(p)} < {alpha:g} ({over}); the interval excludes 0"
        elif on_family_scale(c) < alpha:
            found = Verdict.UNADJUSTED
            reason = (
                f"p {_fmt(c.p_value)} < {_look_level(c, alpha):g} alone, "
                f"adjusted p {_fmt(p)} ({over})"
            )
        else:
            found = Verdict.UNDECIDED
            reason = f"the interval includes 0 (p {_fmt(c.p_value)})"
        rows.append(replace(c, adjusted_p=p, verdict=found, reason=reason))
    return rows


def _look_level(c: MetricComparison, alpha: float) -> float:
    """The level a row's own p is held to: its look's share of `alpha`."""
    return c.look_alpha * alpha / ALPHA


def _share(c: MetricComparison, alpha: float) -> str:
    """The look's share in the reason's words, when it is not the whole of alpha."""
    if c.look_alpha >= ALPHA:
        return ""
    return f", this look's {_look_level(c, alpha):.0%} of {alpha:.0%}"


def _tested(comparisons: Sequence[MetricComparison], declared: set[str] | None) -> list[int]:
    return [
        i
        for i, c in enumerate(comparisons)
        if c.verdict != Verdict.TOO_FEW
        and c.test != NO_DATA
        and (declared is None or c.metric in declared)
    ]


def family_size(
    comparisons: Sequence[MetricComparison],
    family: Sequence[str] | None = None,
    variants: int = 1,
) -> int:
    """How many tests Holm adjusts over: the declared metrics times the variants (or the
    rows that ran a test, when more), else the rows that ran a test."""
    tested = len(_tested(comparisons, None if family is None else set(family)))
    return tested if family is None else max(tested, len(family) * variants)


def minimum_units(analysed_by: str) -> int:
    """The fewest units per arm a row analysed by `unit`, `request`, `row`, `session` or
    `user` (a replayed conversation's, paired like rows) needs."""
    return MIN_ROWS_PAIRED if analysed_by in ("row", "session", "user") else MIN_UNITS_PER_ARM


def too_few(units: int, analysed_by: str = "unit") -> str:
    word = {"row": "rows", "session": "sessions", "user": "users"}.get(analysed_by, "units")
    return f"too few {word} ({units}; a verdict needs {minimum_units(analysed_by)} per arm)"


#: The test name of a comparison row that had no data to test.
NO_DATA = "no data"


# ---- the split itself ----------------------------------------------------------------


def srm_check(
    observed_counts: Mapping[str, int],
    expected_shares: Mapping[str, float],
    threshold: float = SRM_THRESHOLD,
) -> SrmCheck:
    """Chi-square goodness of fit of the units per variant against the expected shares.

    A variant expected to get nothing that got units is a mismatch outright (p = 0).
    """
    names = list(dict.fromkeys([*expected_shares, *observed_counts]))
    observed = {name: int(observed_counts.get(name, 0)) for name in names}
    total = sum(observed.values())
    share_sum = sum(expected_shares.values())
    expected = {
        name: total * expected_shares.get(name, 0.0) / share_sum if share_sum else 0.0
        for name in names
    }
    # Judged once every arm should hold enough units for the chi-square to mean something.
    judged = all(expected[n] >= SRM_MIN_UNITS for n in names if expected[n] > 0)
    if total == 0:
        return SrmCheck(observed, expected, 0.0, 1.0, False, judged=False)
    if any(observed[n] and not expected[n] for n in names):
        return SrmCheck(observed, expected, math.inf, 0.0, True)
    tested = [n for n in names if expected[n] > 0]
    if len(tested) < 2:
        return SrmCheck(observed, expected, 0.0, 1.0, False, judged=False)
    from scipy.stats import chisquare

    result = chisquare([observed[n] for n in tested], [expected[n] for n in tested])
    p = float(result.pvalue)
    return SrmCheck(
        observed, expected, float(result.statistic), p, judged and p < threshold, judged
    )


def sample_size_two_proportions(
    p_base: float, min_detectable_effect: float, alpha: float = 0.05, power: float = 0.8
) -> int:
    """Units per arm a two-sided two-proportion z-test needs to detect an absolute change
    of `min_detectable_effect` from `p_base` with the given power (statsmodels'
    `samplesize_proportions_2indep_onetail`, rounded up)."""
    p_new = p_base + min_detectable_effect
    if not (0 < p_base < 1 and 0 < p_new < 1) or min_detectable_effect == 0:
        raise ValueError(
            f"need 0 < p_base < 1 and 0 < p_base + effect < 1 with a non-zero effect, got "
            f"p_base={p_base}, effect={min_detectable_effect}"
        )
    normal = NormalDist()
    z_alpha = normal.inv_cdf(1 - alpha / 2)
    z_power = normal.inv_cdf(power)
    mean = (p_base + p_new) / 2
    sd_null = math.sqrt(2 * mean * (1 - mean))
    sd_alt = math.sqrt(p_base * (1 - p_base) + p_new * (1 - p_new))
    n = ((z_alpha * sd_null + z_power * sd_alt) / min_detectable_effect) ** 2
    return math.ceil(n - 1e-9)
