"""Always-valid inference while data is still arriving: the mixture sequential probability
ratio test (mSPRT) of Johari, Pekelis and Walsh ("Always Valid Inference", 2017).

Looking again and again at a fixed-horizon test inflates false positives (the A/A
harness measures it). The mSPRT's p-value stays valid at every look: for a normal
estimate D of variance V and a normal mixture of width tau over the effect,

    Lambda = sqrt(V / (V + tau^2)) * exp(tau^2 * D^2 / (2 V (V + tau^2)))

and p = min(1, 1 / Lambda). Its confidence sequence is the set of effects the test would
not reject, so the interval excludes 0 exactly when p < alpha.
"""

from __future__ import annotations

import math

from promptlab.analysis.stats import Interval
from promptlab.analysis.units import Estimate, Inference

#: The mixture's width, as a share of the control's value: the effects the test is tuned
#: to find soonest (30% relative; any width keeps it valid, only its power moves) ...
MIXTURE_RELATIVE = 0.3
#: ... and never narrower than 1 percentage point for a rate, 1 ms for a latency.
MIXTURE_FLOOR_RATE = 0.01
MIXTURE_FLOOR_MS = 1.0


def mixture_width(control_value: float | None, latency: bool) -> float:
    floor = MIXTURE_FLOOR_MS if latency else MIXTURE_FLOOR_RATE
    return max(floor, MIXTURE_RELATIVE * abs(control_value or 0.0))


def always_valid(estimate: Estimate, tau: float, confidence: float = 0.95) -> Inference:
    """The always-valid p-value of effect 0 and the confidence sequence at this look."""
    d, v, t2 = estimate.effect, estimate.variance, tau * tau
    if not v > 0 or math.isinf(v):
        certain = v == 0 and d != 0
        spread = 0.0 if v == 0 else math.inf
        return Inference(Interval(d - spread, d + spread), 0.0 if certain else 1.0)
    log_lambda = 0.5 * math.log(v / (v + t2)) + t2 * d * d / (2 * v * (v + t2))
    p = 1.0 if log_lambda <= 0 else math.exp(-log_lambda)
    alpha = 1 - confidence
    half = math.sqrt(2 * v * (v + t2) / t2 * (math.log(1 / alpha) + 0.5 * math.log((v + t2) / v)))
    return Inference(Interval(d - half, d + half), min(1.0, p))
