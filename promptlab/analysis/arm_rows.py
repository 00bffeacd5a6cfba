"""One arm against another as metric rows: independent arms per unit, or the same
inputs paired and clustered by row (session, user); completion, CTR, scores, and
latency p50/p90/p99, each decided at its look (verdicts from Holm over the table)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from promptlab.analysis.cuped import cuped_rate_difference
from promptlab.analysis.decided import decided
from promptlab.analysis.sequential import FIXED, Look
from promptlab.analysis.stats import (
    MIN_TAIL_REQUESTS,
    NO_DATA,
    MetricComparison,
    Verdict,
    minimum_units,
)
from promptlab.analysis.units import (
    Estimate,
    QuantileDifference,
    linearized,
    paired_quantile_difference,
    paired_rate_difference,
    quantile_difference,
    rate_difference,
    rate_interval,
)
from promptlab.records.unit_samples import (
    COMPLETION,
    CTR,
    SCORE_PREFIX,
    ArmSample,
    PairedSample,
    RatioSample,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

#: The latency percentiles compared, with their metric names.
COMPARED_QUANTILES = ((0.5, "latency p50"), (0.9, "latency p90"), (0.99, "latency p99"))
FIXED_HORIZON = "fixed horizon"


def compare_arms(
    a: ArmSample, b: ArmSample, *, look: Look = FIXED, cuped: bool = False
) -> list[MetricComparison]:
    """B against A, independent arms analysed per unit: completion and CTR (CTR only
    when either arm has impressions), latency p50/p90/p99. Verdicts come from
    `holm_verdicts` over the whole table."""
    by = "unit" if a.per_unit or b.per_unit else "request"
    rows = []
    for metric in (COMPLETION, CTR, *scores_of(a, b)):
        ra, rb = a.rates[metric], b.rates[metric]
        if metric != COMPLETION and not (ra.den.sum() or rb.den.sum()):
            continue
        pre = (a.pre.get(metric), b.pre.get(metric)) if cuped else (None, None)
        rows.append(_rate_row(metric, a.name, b.name, ra, rb, by, look, pre))
    units_a, units_b = a.rates[COMPLETION].num.size, b.rates[COMPLETION].num.size
    differences: list[QuantileDifference] | None = None
    if a.latency.size and b.latency.size:
        qs = tuple(q for q, _ in COMPARED_QUANTILES)
        differences = quantile_difference(
            (a.latency, a.latency_unit, units_a),
            (b.latency, b.latency_unit, units_b),
            qs,
            1 - look.alpha,
        )
    counts = (_distinct(a.latency_unit), _distinct(b.latency_unit), a.latency.size, b.latency.size)
    return rows + _latency_rows(a.name, b.name, a.latency, b.latency, differences, counts, by, look)


def compare_paired(
    pairs: PairedSample,
    a: ArmSample,
    b: ArmSample,
    *,
    look: Look = FIXED,
    by: str = "row",
) -> list[MetricComparison]:
    """B against A over the same inputs (an all-mode run), clustered by dataset row (by
    session or user for a replayed conversation log, `by="session"` or `"user"`):
    completion paired, CTR
    per cluster (impressions are not paired), latency paired."""
    estimate = paired_rate_difference(pairs.completed_a, pairs.completed_b, pairs.finished)
    sample_a = RatioSample(pairs.completed_a, pairs.finished)
    sample_b = RatioSample(pairs.completed_b, pairs.finished)
    rows = [
        _row_from(
            COMPLETION,
            a.name,
            b.name,
            sample_a,
            sample_b,
            estimate,
            by,
            look,
            (pairs.rows, pairs.rows),
            "paired delta method",
        )
    ]
    for metric in (CTR, *scores_of(a, b)):  # not paired: clustered by row, per arm
        if a.rates[metric].den.sum() or b.rates[metric].den.sum():
            rows.append(
                _rate_row(
                    metric, a.name, b.name, a.rates[metric], b.rates[metric], by, look, (None, None)
                )
            )
    differences = None
    if pairs.latency_a.size:
        qs = tuple(q for q, _ in COMPARED_QUANTILES)
        differences = paired_quantile_difference(
            pairs.latency_a, pairs.latency_b, pairs.latency_row, pairs.rows, qs, 1 - look.alpha
        )
    rows_timed = _distinct(pairs.latency_row)
    counts = (rows_timed, rows_timed, pairs.latency_a.size, pairs.latency_b.size)
    return rows + _latency_rows(
        a.name, b.name, pairs.latency_a, pairs.latency_b, differences, counts, by, look, paired=True
    )


def scores_of(a: ArmSample, b: ArmSample) -> list[str]:
    """The score metrics both arms carry (a scorer's mean score, promptlab/evaluation/)."""
    return sorted(m for m in a.rates.keys() & b.rates.keys() if m.startswith(SCORE_PREFIX))


def _distinct(index: object) -> int:
    import numpy as np

    return int(np.unique(np.asarray(index)).size)


def _rate_row(
    metric: str,
    name_a: str,
    name_b: str,
    a: RatioSample,
    b: RatioSample,
    by: str,
    look: Look,
    pre: tuple[RatioSample | None, RatioSample | None],
) -> MetricComparison:
    estimate, reduction, method = rate_difference(a, b), None, "delta method"
    if pre[0] is not None and pre[1] is not None:
        adjusted = cuped_rate_difference(a, b, pre[0], pre[1])
        if adjusted is not None:
            (estimate, reduction), method = adjusted, "delta method + CUPED"
    units = (int((a.den > 0).sum()), int((b.den > 0).sum()))
    row = _row_from(metric, name_a, name_b, a, b, estimate, by, look, units, method)
    return row if reduction is None else replace(row, variance_reduction=reduction)


def _row_from(
    metric: str,
    name_a: str,
    name_b: str,
    a: RatioSample,
    b: RatioSample,
    estimate: Estimate | None,
    by: str,
    look: Look,
    units: tuple[int, int],
    method: str,
) -> MetricComparison:
    value_a, value_b = linearized(a)[0], linearized(b)[0]
    row = MetricComparison(
        metric=metric,
        variant=name_b,
        control=name_a,
        control_value=None if math.isnan(value_a) else value_a,
        variant_value=None if math.isnan(value_b) else value_b,
        n_control=units[0],
        n_variant=units[1],
        effect=None,
        interval=None,
        p_value=1.0,
        test=NO_DATA,
        lower_is_better=False,
        requests_control=int(a.den.sum()),
        requests_variant=int(b.den.sum()),
        analysed_by=by,
        # Each arm's interval at the look's level: one level in all a comparison shows.
        control_interval=rate_interval(a, 1 - look.alpha),
        variant_interval=rate_interval(b, 1 - look.alpha),
    )
    return decided(row, estimate, method, look)


def _latency_rows(
    name_a: str,
    name_b: str,
    xa: FloatArray,
    xb: FloatArray,
    differences: list[QuantileDifference] | None,
    counts: tuple[int, int, int, int],
    by: str,
    look: Look,
    paired: bool = False,
) -> list[MetricComparison]:
    """Latency p50/p90/p99 of B against A from the per-unit `differences`."""
    import numpy as np

    method = "paired delta method (quantile)" if paired else "delta method (quantile)"
    rows = []
    for index, (q, metric) in enumerate(COMPARED_QUANTILES):
        row = _untested_latency_row(metric, name_a, name_b, counts, by)
        if differences is None:
            rows.append(row)
            continue
        found = differences[index]
        row = replace(
            row,
            control_value=float(np.quantile(xa, q)),
            variant_value=float(np.quantile(xb, q)),
            control_interval=found.interval_a,
            variant_interval=found.interval_b,
        )
        beyond = math.floor(min(counts[2], counts[3]) * (1 - q) + 1e-9)
        if beyond < MIN_TAIL_REQUESTS and min(row.n_control, row.n_variant) >= minimum_units(by):
            rows.append(_thin_tail_row(row, found.estimate, method, beyond))
            continue
        rows.append(decided(row, found.estimate, method, look))
    return rows


def _untested_latency_row(
    metric: str, name_a: str, name_b: str, counts: tuple[int, int, int, int], by: str
) -> MetricComparison:
    """A latency percentile's row before any data: units and requests per arm only."""
    return MetricComparison(
        metric=metric,
        variant=name_b,
        control=name_a,
        control_value=None,
        variant_value=None,
        n_control=counts[0],
        n_variant=counts[1],
        effect=None,
        interval=None,
        p_value=1.0,
        test=NO_DATA,
        lower_is_better=True,
        requests_control=counts[2],
        requests_variant=counts[3],
        analysed_by=by,
    )


def _thin_tail_row(
    row: MetricComparison, estimate: Estimate, method: str, beyond: int
) -> MetricComparison:
    """The percentile's effect without a verdict: too few requests lie beyond it."""
    # p99 of 200 requests rests on two of them: no verdict on so thin a tail.
    reason = (
        f"too few requests beyond {row.metric.split()[-1]} ({beyond}; a verdict needs "
        f"{MIN_TAIL_REQUESTS} in each arm)"
    )
    return replace(row, effect=estimate.effect, test=method, verdict=Verdict.TOO_FEW, reason=reason)
