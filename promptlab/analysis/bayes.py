"""The Bayesian view of a comparison row: chance to beat control and expected loss.

From the same per-unit estimate the row's test uses (its effect and standard error),
with a flat prior and the normal approximation, as GrowthBook and PostHog document it:
the effect's posterior is Normal(effect, se²).

- **chance to beat control**: P(the variant is better) under that posterior: Φ(effect /
  se), or Φ(-effect / se) for a metric where lower is better (latency).
- **expected loss** (GrowthBook's "risk"): what choosing the variant costs on average if
  it is in fact worse, E[max(0, -improvement)] = se·φ(μ/se) - μ·Φ(-μ/se), with μ the
  improvement (the effect, sign turned for lower-is-better metrics), in the metric's
  unit (a rate, or milliseconds).

These are not corrected for peeking or for the number of metrics: with no difference,
"chance > 95%" fires on 5% of single rows, far more over a table and many looks
(bench/aa.py states how often; tests/test_aa.py guards it). The verdict column stays
the frequentist test's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

#: A chance to beat control above this (or below 1 minus it) is what a Bayesian
#: dashboard would call a winner (or a loser); bench/aa.py measures how often it fires
#: with no difference.
CHANCE_THRESHOLD = 0.95

_NORMAL = NormalDist()


@dataclass(frozen=True)
class BayesView:
    chance_to_beat: float
    expected_loss: float


def bayes_view(effect: float | None, se: float | None, lower_is_better: bool) -> BayesView | None:
    """The row's chance to beat control and expected loss; None without an effect or a
    positive, finite standard error."""
    if effect is None or se is None or not math.isfinite(effect):
        return None
    if not (math.isfinite(se) and se > 0):
        return None
    improvement = -effect if lower_is_better else effect
    z = improvement / se
    chance = _NORMAL.cdf(z)
    loss = se * _NORMAL.pdf(z) - improvement * _NORMAL.cdf(-z)
    return BayesView(chance_to_beat=chance, expected_loss=max(0.0, loss))
