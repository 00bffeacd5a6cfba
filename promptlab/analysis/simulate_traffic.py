"""The A/A harness's traffic: seeded arms of users shaped like real logs, and the
sample `compare` reads from them.

Each arm gets `units` users with a heavy-tailed number of requests (1 + a Lomax draw),
and users differ in every metric: click propensity and completion propensity from Beta
distributions, a latency scale from a lognormal. Two shapes:

- `logs`: every request has a known completion and a known click (production logs);
- `split`: a split run's results, where a result gets an impression with probability
  IMPRESSION_SHARE and a click only after one (feedback).

Apart from simulate.py (the rates measured over many pairs) because the other harnesses
(simulate_shared.py's contamination case, the unit tests) draw the same arms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from promptlab.records.unit_samples import COMPLETION, CTR, SCORE_PREFIX, ArmSample, RatioSample

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

#: A split run's result gets an impression (is shown) this often.
IMPRESSION_SHARE = 0.7


@dataclass(frozen=True)
class Traffic:
    """How one simulated arm's users behave."""

    units: int = 600
    #: Requests per user: 1 + floor(Lomax(shape) * scale), capped.
    requests_shape: float = 2.0
    requests_scale: float = 4.0
    max_requests: int = 400
    ctr_mean: float = 0.1
    #: Beta concentration (a + b): lower means users differ more.
    ctr_concentration: float = 10.0
    completion_mean: float = 0.9
    completion_concentration: float = 4.0
    latency_median_ms: float = 800.0
    #: Spread of users' latency scale, and of requests around it (lognormal sigmas).
    latency_unit_sigma: float = 0.6
    latency_request_sigma: float = 0.4
    #: Relative lift of every user's click propensity (0.6 = +60%).
    ctr_lift: float = 0.0
    #: `logs` or `split` (see the module's docstring).
    shape: str = "logs"
    #: Pre-period requests per user relative to the experiment's; 0 = no pre-period.
    pre_share: float = 0.0
    #: How far a user's pre-period click propensity drifts (logit scale sigma).
    pre_drift: float = 0.5
    #: Mean of users' propensity to get a right answer (an accuracy score against
    #: expected answers); None: the arms carry no score. Drawn from a generator spawned
    #: off the arm's, so the other metrics' draws stay as they were.
    accuracy_mean: float | None = None
    accuracy_concentration: float = 4.0


@dataclass(frozen=True)
class Requests:
    """One simulated arm, request by request."""

    unit: Any
    time: Any
    completed: Any
    shown: Any
    clicked: Any
    latency: Any
    units: int
    pre_shown: Any = None
    pre_clicked: Any = None
    right: Any = None


def simulate_arm(traffic: Traffic, rng: Any) -> Requests:
    """One arm of `traffic.units` users, every request with its time in [0, 1)."""
    import numpy as np

    k = traffic.units
    counts = 1 + np.floor(rng.pareto(traffic.requests_shape, k) * traffic.requests_scale)
    counts = np.minimum(counts, traffic.max_requests).astype(np.int64)
    unit = np.repeat(np.arange(k), counts)
    ctr = beta_draws(rng, traffic.ctr_mean, traffic.ctr_concentration, k)
    lifted = np.minimum(ctr * (1 + traffic.ctr_lift), 1.0)
    done = beta_draws(rng, traffic.completion_mean, traffic.completion_concentration, k)
    scale = traffic.latency_median_ms * rng.lognormal(0, traffic.latency_unit_sigma, k)
    n = unit.size
    shown = np.ones(n, dtype=bool)
    if traffic.shape == "split":
        shown = rng.random(n) < IMPRESSION_SHARE
    clicked = shown & (rng.random(n) < lifted[unit])
    pre_shown = pre_clicked = None
    if traffic.pre_share > 0:
        # The same users before the experiment: their propensity drifted a little.
        logit = np.log(ctr / (1 - ctr)) + rng.normal(0, traffic.pre_drift, k)
        before = 1 / (1 + np.exp(-logit))
        pre_counts = np.maximum(1, np.round(counts * traffic.pre_share)).astype(np.int64)
        pre_shown = pre_counts.astype(np.float64)
        pre_clicked = rng.binomial(pre_counts, before).astype(np.float64)
    requests = Requests(
        unit=unit,
        time=rng.random(n),
        completed=rng.random(n) < done[unit],
        shown=shown,
        clicked=clicked,
        latency=scale[unit] * rng.lognormal(0, traffic.latency_request_sigma, n),
        units=k,
        pre_shown=pre_shown,
        pre_clicked=pre_clicked,
    )
    if traffic.accuracy_mean is None:
        return requests
    own = rng.spawn(1)[0]
    accuracy = beta_draws(own, traffic.accuracy_mean, traffic.accuracy_concentration, k)
    return replace(requests, right=own.random(n) < accuracy[unit])


def beta_draws(rng: Any, mean: float, concentration: float, size: int) -> FloatArray:
    """`size` draws from the Beta of this mean and concentration (a + b)."""
    draws: FloatArray = rng.beta(mean * concentration, (1 - mean) * concentration, size)
    return draws


def arm_sample(
    name: str, requests: Requests, until: float = 1.0, per_request: bool = False
) -> ArmSample:
    """The requests before `until` as `compare` reads them: summed per user (or, with
    `per_request`, each request alone, as the request-level analysis did)."""
    import numpy as np

    keep = requests.time < until
    unit = requests.unit[keep]
    if per_request:
        unit = np.arange(unit.size)
    present, index = np.unique(unit, return_inverse=True)
    k = present.size

    def per_unit(values: Any) -> FloatArray:
        summed = np.bincount(index, weights=values[keep].astype(np.float64), minlength=k)
        return np.asarray(summed, dtype=np.float64)

    ones = np.ones(requests.unit.size)
    scores = {}
    if requests.right is not None:
        scores = {SCORE_PREFIX + "exact": RatioSample(per_unit(requests.right), per_unit(ones))}
    pre = {}
    if requests.pre_shown is not None and not per_request:
        pre = {CTR: RatioSample(requests.pre_clicked[present], requests.pre_shown[present])}
    return ArmSample(
        name=name,
        units=k,
        requests=int(keep.sum()),
        unitless=k if per_request else 0,
        rates={
            COMPLETION: RatioSample(per_unit(requests.completed), per_unit(ones)),
            CTR: RatioSample(per_unit(requests.clicked), per_unit(requests.shown)),
            **scores,
        },
        latency=requests.latency[keep],
        latency_unit=index.astype(np.int64),
        pre=pre,
    )
