"""Effects measured at the unit that was randomized: the delta method for rates and for
latency percentiles, and the one inference each row gets.

A rate (completion, CTR) of an arm is a ratio of per-unit sums, R = sum(Y) / sum(N).
Requests of one unit are correlated, so its variance is that of a ratio of means (the
delta method, Deng, Knoblich and Lu, "Applying the Delta Method in Metric Analytics",
KDD 2018): with the linearization l_i = (Y_i - R N_i) / mean(N), var(R) = var(l) / k over
k units. A percentile's comes from the share of requests below it, itself such a rate.

Every row's interval and p-value come from one method, so they always agree: a Wald
interval and its z-test on the delta method's standard error; or, while data is still
arriving, a confidence sequence and its always-valid p-value
(`promptlab.analysis.sequential`) on the same standard error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

from promptlab.analysis.stats import Interval

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from promptlab.records.unit_samples import RatioSample

    FloatArray = npt.NDArray[np.float64]
    IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Estimate:
    """An effect (B - A) and what its uncertainty is known from.

    `variance` is the estimate's (delta method, or the bootstrap draws' variance).
    """

    effect: float
    variance: float
    #: Degrees of freedom of its standard error (Welch-Satterthwaite over the units of
    #: both arms): with few units the fixed-horizon test uses Student's t, not the normal.
    df: float = math.inf


@dataclass(frozen=True)
class Inference:
    interval: Interval
    p_value: float


# ---- rates: the delta method -----------------------------------------------------------


def linearized(sample: RatioSample) -> tuple[float, FloatArray]:
    """The rate sum(Y)/sum(N) and each unit's linearized contribution l_i."""
    import numpy as np

    num, den = sample.num, sample.den
    mean_den = float(den.mean()) if den.size else 0.0
    if mean_den <= 0:
        return math.nan, np.zeros_like(num)
    rate = float(num.sum() / den.sum())
    return rate, (num - rate * den) / mean_den


def _variance_of_mean(values: FloatArray) -> float:
    return float(values.var(ddof=1) / values.size) if values.size > 1 else math.inf


def welch_df(va: float, ka: int, vb: float, kb: int) -> float:
    """Welch-Satterthwaite degrees of freedom of va + vb (variances of two means over ka
    and kb units)."""
    if not (math.isfinite(va) and math.isfinite(vb)) or ka < 2 or kb < 2 or va + vb <= 0:
        return math.inf
    return (va + vb) ** 2 / (va * va / (ka - 1) + vb * vb / (kb - 1))


def rate_variance(sample: RatioSample) -> float:
    """The variance of an arm's rate, from its units (the delta method)."""
    return _variance_of_mean(linearized(sample)[1])


def rate_interval(sample: RatioSample, confidence: float = 0.95) -> Interval | None:
    """The Wald interval of one arm's rate by the delta method, clipped to [0, 1]."""
    rate, lin = linearized(sample)
    if math.isnan(rate) or lin.size < 2:
        return None
    half = z_of(confidence) * math.sqrt(_variance_of_mean(lin))
    return Interval(max(0.0, rate - half), min(1.0, rate + half))


def rate_difference(a: RatioSample, b: RatioSample) -> Estimate | None:
    """R_b - R_a for independent arms; None when an arm has no denominator."""
    rate_a, lin_a = linearized(a)
    rate_b, lin_b = linearized(b)
    if math.isnan(rate_a) or math.isnan(rate_b):
        return None
    va, vb = _variance_of_mean(lin_a), _variance_of_mean(lin_b)
    return Estimate(rate_b - rate_a, va + vb, welch_df(va, lin_a.size, vb, lin_b.size))


def paired_rate_difference(
    completed_a: FloatArray, completed_b: FloatArray, finished: FloatArray
) -> Estimate | None:
    """R_b - R_a over the same clusters (rows of an all-mode run): the pairs' shared
    input cancels, so the variance is that of the per-cluster difference."""
    from promptlab.records.unit_samples import RatioSample

    rate_a, lin_a = linearized(RatioSample(completed_a, finished))
    rate_b, lin_b = linearized(RatioSample(completed_b, finished))
    if math.isnan(rate_a):
        return None
    return Estimate(rate_b - rate_a, _variance_of_mean(lin_b - lin_a), lin_a.size - 1.0)


# ---- percentiles: the delta method on the CDF ------------------------------------------


@dataclass(frozen=True)
class QuantileDifference:
    """quantile(b) - quantile(a) at one q, and each arm's own interval (for charts)."""

    estimate: Estimate
    interval_a: Interval | None
    interval_b: Interval | None


@dataclass(frozen=True)
class _ArmQuantile:
    value: float
    #: Per unit: the linearized share of its requests at or below the quantile.
    lin: FloatArray
    #: dQ/dp, the quantile's change per unit of probability near q (1 / density).
    slope: float
    interval: Interval | None


def sorted_quantile(ordered: FloatArray, p: float) -> float:
    """`np.quantile(values, p)` of `ordered = np.sort(values)`, to the last bit (its
    default, linear method): a sort per arm serves every percentile and its interval,
    where each `np.quantile` call partitioned the arm again (a third of the A/A
    harness's time)."""
    last = ordered.size - 1
    index = last * p  # numpy's virtual index for its linear method
    below = min(max(math.floor(index), 0), last)
    above = min(below + 1, last)
    gamma = index - below
    a, b = float(ordered[below]), float(ordered[above])
    step = b - a
    return b - step * (1 - gamma) if gamma >= 0.5 else a + step * gamma


def _arm_quantile(
    values: FloatArray,
    unit: IntArray,
    units: int,
    q: float,
    ordered: FloatArray,
    confidence: float = 0.95,
) -> _ArmQuantile:
    """The q-quantile of an arm and what its variance is made of, per unit.

    The share of requests at or below the quantile is a rate (a ratio of per-unit sums),
    so its standard error s comes from the delta method over units; the quantile's
    interval is [Q(q - z s), Q(q + z s)] (Woodruff's), and its slope turns s into the
    quantile's standard error. This is the quantile method of Deng, Knoblich and Lu
    (2018); on the A/A harness it held p99 at its nominal rate where a bootstrap of
    units did not (9% false positives at 5%). The slope is measured over the 95% span
    whatever `confidence` the interval shown is at: the effect's standard error (and
    so its test) does not move with the level a page shows.
    """
    import numpy as np

    from promptlab.records.unit_samples import RatioSample

    value = sorted_quantile(ordered, q)
    below: FloatArray = np.bincount(
        unit, weights=(values <= value).astype(np.float64), minlength=units
    ).astype(np.float64)
    requests = np.bincount(unit, minlength=units).astype(np.float64)
    _, lin = linearized(RatioSample(below, requests))
    spread = math.sqrt(_variance_of_mean(lin)) if lin.size > 1 else math.inf
    if not math.isfinite(spread):
        return _ArmQuantile(value, lin, math.inf, None)
    z = z_of(0.95)
    # Clipped at 0 and 1 (p99 with few requests): the slope is over the span kept.
    p_low, p_high = max(0.0, q - z * spread), min(1.0, q + z * spread)
    low, high = sorted_quantile(ordered, p_low), sorted_quantile(ordered, p_high)
    if spread == 0:
        return _ArmQuantile(value, lin, 0.0, Interval(float(low), float(high)))
    if high == low:
        # Tied latencies around the percentile: the slope is not measurable here, and
        # zero would claim a certainty the data does not have.
        return _ArmQuantile(value, lin, math.inf, None)
    slope = float(high - low) / (p_high - p_low)
    if confidence != 0.95:
        z = z_of(confidence)
        p_low, p_high = max(0.0, q - z * spread), min(1.0, q + z * spread)
        low, high = sorted_quantile(ordered, p_low), sorted_quantile(ordered, p_high)
    return _ArmQuantile(value, lin, slope, Interval(float(low), float(high)))


def quantile_difference(
    a: tuple[FloatArray, IntArray, int],
    b: tuple[FloatArray, IntArray, int],
    qs: tuple[float, ...],
    confidence: float = 0.95,
) -> list[QuantileDifference]:
    """quantile(b) - quantile(a) for each q, independent arms, each given as
    (latencies, unit index of each, units); each arm's interval at `confidence`."""
    import numpy as np

    found = []
    ordered_a, ordered_b = np.sort(a[0]), np.sort(b[0])
    for q in qs:
        qa = _arm_quantile(*a, q, ordered_a, confidence)
        qb = _arm_quantile(*b, q, ordered_b, confidence)
        va = qa.slope**2 * _variance_of_mean(qa.lin)
        vb = qb.slope**2 * _variance_of_mean(qb.lin)
        variance = va + vb  # NaN (an infinite slope times no spread): no verdict
        df = welch_df(va, qa.lin.size, vb, qb.lin.size)
        estimate = Estimate(qb.value - qa.value, variance, df)
        found.append(QuantileDifference(estimate, qa.interval, qb.interval))
    return found


def paired_quantile_difference(
    latency_a: FloatArray,
    latency_b: FloatArray,
    row: IntArray,
    rows: int,
    qs: tuple[float, ...],
    confidence: float = 0.95,
) -> list[QuantileDifference]:
    """quantile(b) - quantile(a) over pairs clustered by row: the same rows feed both
    arms, so the variance is that of the per-row difference of their contributions;
    each arm's interval at `confidence`."""
    import numpy as np

    found = []
    ordered_a, ordered_b = np.sort(latency_a), np.sort(latency_b)
    for q in qs:
        qa = _arm_quantile(latency_a, row, rows, q, ordered_a, confidence)
        qb = _arm_quantile(latency_b, row, rows, q, ordered_b, confidence)
        combined = qb.slope * qb.lin - qa.slope * qa.lin
        variance = _variance_of_mean(combined)
        estimate = Estimate(qb.value - qa.value, variance, rows - 1.0)
        found.append(QuantileDifference(estimate, qa.interval, qb.interval))
    return found


# ---- one inference per row -------------------------------------------------------------


def z_of(confidence: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def fixed_horizon(estimate: Estimate, confidence: float = 0.95) -> Inference:
    """The Wald interval and its two-sided test (Student's t on the estimate's degrees of
    freedom, the normal when they are unbounded): the interval excludes 0 exactly when
    p < 1 - confidence."""
    if math.isnan(estimate.variance) or estimate.variance < 0:
        return Inference(Interval(-math.inf, math.inf), 1.0)
    se = math.sqrt(estimate.variance) if estimate.variance > 0 else 0.0
    if se == 0 or math.isinf(se):
        certain = se == 0 and estimate.effect != 0
        spread = math.inf if math.isinf(se) else 0.0
        interval = Interval(estimate.effect - spread, estimate.effect + spread)
        return Inference(interval, 0.0 if certain else 1.0)
    if math.isfinite(estimate.df):
        from scipy.stats import t

        half = float(t.ppf(1 - (1 - confidence) / 2, estimate.df)) * se
        p = float(2 * t.sf(abs(estimate.effect) / se, estimate.df))
    else:
        half = z_of(confidence) * se
        p = 2 * NormalDist().cdf(-abs(estimate.effect) / se)
    return Inference(Interval(estimate.effect - half, estimate.effect + half), p)
