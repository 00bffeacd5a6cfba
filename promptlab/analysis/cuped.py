"""CUPED for rates: each unit's pre-period rate as a covariate (Deng, Xu, Kohavi and Walker,
"Improving the Sensitivity of Online Controlled Experiments by Utilizing Pre-Experiment
Data", 2013), on the delta method's linearization so it holds for ratio metrics.

With l_i a unit's linearized contribution in the experiment and x_i its linearized
pre-period rate (pooled over both arms, so a unit without history has x_i = 0, the
average), theta = cov(l, x) / var(x) within arms, and the effect is
(R_b - theta * mean(x_b)) - (R_a - theta * mean(x_a)), of variance
var(l - theta x) / k per arm. Randomization makes mean(x) equal in expectation across
arms, so the effect is unbiased; the variance falls by the share of it x explains.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from promptlab.analysis.units import Estimate, linearized

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from promptlab.records.unit_samples import RatioSample

    FloatArray = npt.NDArray[np.float64]


def cuped_rate_difference(
    a: RatioSample, b: RatioSample, pre_a: RatioSample, pre_b: RatioSample
) -> tuple[Estimate, float] | None:
    """The adjusted R_b - R_a and the share of variance removed (0 when the pre-period
    explains nothing); None when an arm has no denominator or there is no pre-period."""
    import numpy as np

    rate_a, lin_a = linearized(a)
    rate_b, lin_b = linearized(b)
    pre_den = np.concatenate([pre_a.den, pre_b.den])
    if math.isnan(rate_a) or math.isnan(rate_b) or not pre_den.sum() > 0:
        return None
    pooled = (pre_a.num.sum() + pre_b.num.sum()) / pre_den.sum()
    scale = pre_den.mean()
    x_a = (pre_a.num - pooled * pre_a.den) / scale
    x_b = (pre_b.num - pooled * pre_b.den) / scale
    spread = ((x_a - x_a.mean()) ** 2).sum() + ((x_b - x_b.mean()) ** 2).sum()
    if not spread > 0:
        return None
    theta = float((lin_a * (x_a - x_a.mean())).sum() + (lin_b * (x_b - x_b.mean())).sum()) / spread
    effect = (rate_b - theta * x_b.mean()) - (rate_a - theta * x_a.mean())
    before = lin_a.var(ddof=1) / lin_a.size + lin_b.var(ddof=1) / lin_b.size
    after = (lin_a - theta * x_a).var(ddof=1) / lin_a.size + (lin_b - theta * x_b).var(
        ddof=1
    ) / lin_b.size
    reduction = 1 - after / before if before > 0 else 0.0
    return Estimate(float(effect), float(after)), float(reduction)
