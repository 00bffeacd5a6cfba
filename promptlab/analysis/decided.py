"""A comparison row decided: its effect, interval and p-value at the look (the test's
own p, with the look's share of the 5% beside it), or "too few units"; with the Bayesian
view of the same estimate."""

from __future__ import annotations

import math
from dataclasses import replace

from promptlab.analysis.bayes import bayes_view
from promptlab.analysis.sequential import Look, infer
from promptlab.analysis.stats import MetricComparison, Verdict, minimum_units, too_few
from promptlab.analysis.units import Estimate


def decided(
    row: MetricComparison, estimate: Estimate | None, method: str, look: Look
) -> MetricComparison:
    """The row with its effect, interval and p-value, or too few units, or no data."""
    if estimate is None:
        return row
    fewest = min(row.n_control, row.n_variant)
    if fewest < minimum_units(row.analysed_by):
        return replace(
            row,
            effect=estimate.effect,
            test=method,
            verdict=Verdict.TOO_FEW,
            reason=too_few(fewest, row.analysed_by),
        )
    found = infer(estimate, look, (row.n_control + row.n_variant) / 2)
    se = math.sqrt(estimate.variance) if math.isfinite(estimate.variance) else None
    name = f"{method} per {row.analysed_by}" + (" · mSPRT" if look.sequential else "")
    view = bayes_view(estimate.effect, se, row.lower_is_better)
    return replace(
        row,
        effect=estimate.effect,
        interval=found.interval,
        p_value=found.p_value,
        look_alpha=look.alpha,
        test=name,
        standard_error=se,
        chance_to_beat=view.chance_to_beat if view else None,
        expected_loss=view.expected_loss if view else None,
    )
