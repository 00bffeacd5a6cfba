"""The statistics behind `promptlab compare`: intervals, tests, corrections, SRM, sample size.

Pure functions over counts and NumPy arrays (no store). scipy is imported inside the
functions that need its distributions, so importing this module stays light.

Conventions: a difference is always B minus A (variant minus control); every test is
two-sided; intervals are at `confidence` (95% by default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

#: p-values below this (after Holm) may say better or worse.
ALPHA = 0.05
#: An SRM p-value below this is a sample-ratio mismatch: the split is broken.
SRM_THRESHOLD = 0.001
#: Below this many discordant pairs McNemar's test is the exact binomial one.
MCNEMAR_EXACT_BELOW = 25
#: Fisher's exact test replaces the z-test when an expected cell is below this.
FISHER_EXPECTED_BELOW = 5


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    UNDECIDED = "not yet distinguishable"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class TestResult:
    """A test's statistic, two-sided p-value and name."""

    statistic: float
    p_value: float
    test: str


@dataclass(frozen=True)
class Difference:
    """An effect (B - A) with its interval, a p-value and the test that gave it."""

    effect: float
    interval: Interval
    p_value: float
    test: str


@dataclass(frozen=True)
class SrmCheck:
    """Observed units per variant against the shares the split should give."""

    observed: dict[str, int]
    expected: dict[str, float]
    statistic: float
    p_value: float
    #: True when p < SRM_THRESHOLD: the assignment is broken, the comparison suspect.
    mismatch: bool


@dataclass(frozen=True)
class MetricComparison:
    """One metric of one variant against control: what `promptlab compare` prints a row of."""

    metric: str
    variant: str
    control: str
    control_value: float | None
    variant_value: float | None
    n_control: int
    n_variant: int
    #: variant - control, in the metric's unit (a rate, or milliseconds).
    effect: float | None
    interval: Interval | None
    p_value: float
    test: str
    lower_is_better: bool
    #: Holm-adjusted across every comparison of one table; set by `holm_verdicts`.
    adjusted_p: float | None = None
    verdict: Verdict = Verdict.UNDECIDED


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


def two_proportions(s_a: int, n_a: int, s_b: int, n_b: int, confidence: float = 0.95) -> Difference:
    """p_b - p_a with Newcombe's hybrid score interval and a two-sided p-value.

    The p-value is Fisher's exact test when any expected cell of the 2x2 table is below
    FISHER_EXPECTED_BELOW, else the pooled two-proportion z-test.
    """
    if n_a <= 0 or n_b <= 0:
        return Difference(0.0, Interval(-1.0, 1.0), 1.0, NO_DATA)
    p_a, p_b = s_a / n_a, s_b / n_b
    wa, wb = wilson_interval(s_a, n_a, confidence), wilson_interval(s_b, n_b, confidence)
    diff = p_b - p_a
    interval = Interval(
        diff - math.sqrt((p_b - wb.low) ** 2 + (wa.high - p_a) ** 2),
        diff + math.sqrt((wb.high - p_b) ** 2 + (p_a - wa.low) ** 2),
    )
    total, successes = n_a + n_b, s_a + s_b
    expected = [n * k / total for n in (n_a, n_b) for k in (successes, total - successes)]
    if min(expected) < FISHER_EXPECTED_BELOW:
        from scipy.stats import fisher_exact

        table = [[s_b, n_b - s_b], [s_a, n_a - s_a]]
        p = float(fisher_exact(table, alternative="two-sided").pvalue)
        return Difference(diff, interval, min(1.0, p), "Fisher exact")
    pooled = successes / total
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
    z = diff / se
    p = 2 * NormalDist().cdf(-abs(z))
    return Difference(diff, interval, p, "two-proportion z")


# ---- latency -------------------------------------------------------------------------


def _as_sorted(values: Any) -> FloatArray:
    import numpy as np

    array = np.sort(np.asarray(values, dtype=np.float64))
    if array.size and not np.isfinite(array).all():
        raise ValueError("latency samples must be finite numbers")
    return array


def _bootstrap_quantiles(sorted_x: FloatArray, q: float, n_boot: int, rng: Any) -> FloatArray:
    """`n_boot` draws of the q-quantile (linear, as numpy and DuckDB's quantile_cont) of a
    resample with replacement of `sorted_x`, without materializing any resample.

    A resample's r-th order statistic is sorted_x[ceil(n * U_(r)) - 1], U_(r) the r-th of n
    uniform order statistics: U_(r) ~ Beta(r, n - r + 1), and the next one is
    U_(r) + (1 - U_(r)) * Beta(1, n - r). That is exactly the distribution resampling n
    indexes gives, at O(n_boot) work and memory instead of O(n_boot * n).
    """
    import numpy as np

    n = sorted_x.size
    h = (n - 1) * q
    lo = math.floor(h)
    frac = h - lo
    r = lo + 1  # 1-based rank of the lower order statistic
    u_r = rng.beta(r, n - r + 1, size=n_boot)

    def at(u: FloatArray) -> FloatArray:
        index = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
        return sorted_x[index]

    low = at(u_r)
    if frac == 0 or r >= n:
        return low
    u_next = u_r + (1 - u_r) * rng.beta(1, n - r, size=n_boot)
    return low + frac * (at(u_next) - low)


def bootstrap_quantile_diff(
    a: Any, b: Any, q: float, n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, Interval]:
    """The difference quantile(b, q) - quantile(a, q) and its percentile bootstrap interval.

    Each arm is resampled independently (see `_bootstrap_quantiles`: exact, and bounded
    memory at a million samples). Quantiles are linear (numpy's default, DuckDB's
    quantile_cont).
    """
    import numpy as np

    if not 0 <= q <= 1:
        raise ValueError(f"q must be in [0, 1], got {q}")
    xa, xb = _as_sorted(a), _as_sorted(b)
    if not xa.size or not xb.size:
        raise ValueError("both samples need at least one value")
    rng = np.random.default_rng(seed)
    effect = float(np.quantile(xb, q) - np.quantile(xa, q))
    diffs = _bootstrap_quantiles(xb, q, n_boot, rng) - _bootstrap_quantiles(xa, q, n_boot, rng)
    tail = (1 - confidence) / 2
    low, high = np.quantile(diffs, [tail, 1 - tail])
    return effect, Interval(float(low), float(high))


def mann_whitney(a: Any, b: Any) -> TestResult:
    """Mann-Whitney U (two-sided) of b against a; the statistic is b's U."""
    import numpy as np
    from scipy.stats import mannwhitneyu

    xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not xa.size or not xb.size:
        return TestResult(math.nan, 1.0, "Mann-Whitney U")
    result = mannwhitneyu(xb, xa, alternative="two-sided")
    return TestResult(float(result.statistic), _defined(result.pvalue), "Mann-Whitney U")


def _defined(p_value: Any) -> float:
    """A test's p-value; NaN (no variation to test) is no evidence at all: 1."""
    p = float(p_value)
    return 1.0 if math.isnan(p) else p


# ---- paired (all-mode runs) ----------------------------------------------------------


def mcnemar(b: int, c: int) -> TestResult:
    """McNemar's test on the discordant pairs: b (only A succeeded), c (only B did).

    Exact binomial below MCNEMAR_EXACT_BELOW discordant pairs, else chi-square with
    continuity correction (statsmodels' `mcnemar(exact=..., correction=True)`).
    """
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be 0 or more")
    n = b + c
    if n == 0:
        return TestResult(0.0, 1.0, "McNemar exact")
    if n < MCNEMAR_EXACT_BELOW:
        from scipy.stats import binom

        p = min(1.0, 2 * float(binom.cdf(min(b, c), n, 0.5)))
        return TestResult(float(min(b, c)), p, "McNemar exact")
    from scipy.stats import chi2

    statistic = (abs(b - c) - 1) ** 2 / n
    return TestResult(statistic, float(chi2.sf(statistic, 1)), "McNemar chi-square")


def wilcoxon_paired(a: Any, b: Any) -> TestResult:
    """Wilcoxon signed-rank test (two-sided) on the pair differences b - a."""
    import numpy as np
    from scipy.stats import wilcoxon

    xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if xa.shape != xb.shape:
        raise ValueError(f"paired samples differ in length: {xa.size} and {xb.size}")
    if not np.any(xb - xa):
        return TestResult(0.0, 1.0, "Wilcoxon signed-rank")
    result = wilcoxon(xb, xa, alternative="two-sided")
    return TestResult(float(result.statistic), _defined(result.pvalue), "Wilcoxon signed-rank")


# ---- many comparisons ----------------------------------------------------------------


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def verdict(
    effect: float | None,
    interval: Interval | None,
    adjusted_p: float,
    lower_is_better: bool,
    alpha: float = ALPHA,
) -> Verdict:
    """Better or worse only when the adjusted p-value is below alpha and the interval
    excludes zero on the same side as the effect; otherwise not yet distinguishable."""
    if effect is None or interval is None or adjusted_p >= alpha or not interval.excludes_zero():
        return Verdict.UNDECIDED
    if (interval.low > 0) != (effect > 0) or effect == 0:
        return Verdict.UNDECIDED
    up = effect > 0
    return Verdict.WORSE if up == lower_is_better else Verdict.BETTER


def holm_verdicts(
    comparisons: Sequence[MetricComparison], alpha: float = ALPHA
) -> list[MetricComparison]:
    """The comparisons with Holm-adjusted p-values and verdicts.

    The family is the distinct tests run: a row without data ran none (its adjusted p
    stays None), and the latency percentile rows of one pair share one rank test, so
    that test counts once, not once per percentile.
    """
    hypotheses: dict[tuple[Any, ...], float] = {}
    for c in comparisons:
        if c.test != NO_DATA:
            hypotheses.setdefault(_hypothesis(c), c.p_value)
    adjusted = dict(zip(hypotheses, holm(list(hypotheses.values())), strict=True))
    rows = []
    for c in comparisons:
        if c.test == NO_DATA:
            rows.append(replace(c, adjusted_p=None, verdict=Verdict.UNDECIDED))
            continue
        p = adjusted[_hypothesis(c)]
        rows.append(
            replace(
                c, adjusted_p=p, verdict=verdict(c.effect, c.interval, p, c.lower_is_better, alpha)
            )
        )
    return rows


#: The test name of a comparison row that had no data to test.
NO_DATA = "no data"


def _hypothesis(c: MetricComparison) -> tuple[Any, ...]:
    # Percentile rows carry their pair's one rank test (`bootstrap + Mann-Whitney U`).
    if c.test.startswith("bootstrap + "):
        return (c.variant, c.control, c.test)
    return (c.variant, c.control, c.metric)


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
    if total == 0:
        return SrmCheck(observed, expected, 0.0, 1.0, False)
    if any(observed[n] and not expected[n] for n in names):
        return SrmCheck(observed, expected, math.inf, 0.0, True)
    tested = [n for n in names if expected[n] > 0]
    if len(tested) < 2:
        return SrmCheck(observed, expected, 0.0, 1.0, False)
    from scipy.stats import chisquare

    result = chisquare([observed[n] for n in tested], [expected[n] for n in tested])
    p = float(result.pvalue)
    return SrmCheck(observed, expected, float(result.statistic), p, p < threshold)


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
