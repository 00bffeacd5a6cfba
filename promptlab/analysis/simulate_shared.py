"""The A/A harness's contamination case: units seen under both versions, kept or left out.

On `simulate_traffic.py`'s traffic with a real CTR lift, a share of B's users are also
A's: half of each such user's requests are logged under the other version (two rollouts
mixed in the logs, a re-weighted split). Kept, those users carry both treatments in both
arms and pull the effect towards zero; left out (promptlab/analysis/contamination.py),
the effect is estimated on users who saw one version.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from promptlab.analysis.compare import compare_arms
from promptlab.analysis.contamination import without_shared
from promptlab.analysis.simulate_traffic import Requests, Traffic, arm_sample, simulate_arm
from promptlab.analysis.stats import Verdict, holm_verdicts
from promptlab.records.unit_samples import CTR, ArmSample

#: B's user ids start here, but for the shared ones, which keep A's ids.
_B_KEYS = 1 << 32


@dataclass(frozen=True)
class SharedFigures:
    """Mean CTR effect (B - A) and the power to find it better, over the pairs."""

    effect_clean: float
    effect_kept: float
    effect_left_out: float
    power_kept: float
    power_left_out: float


def contamination_effects(
    pairs: int, traffic: Traffic, lift: float, share: float, seed: int = 11
) -> SharedFigures:
    """`share` of the users in both arms (see the module docstring), kept or left out,
    against the same pairs without any sharing."""
    import numpy as np

    rng = np.random.default_rng(seed)
    clean, kept, left, found_kept, found_left = [], [], [], 0, 0
    shared = int(traffic.units * share)
    for _ in range(pairs):
        a = simulate_arm(traffic, rng)
        b = simulate_arm(replace(traffic, ctr_lift=lift), rng)
        clean.append(_ctr_effect(compare_arms(_keyed("A", a, 0), _keyed("B", b, 0))))
        mixed_a, mixed_b = _mixed(a, b, shared, rng)
        arm_a, arm_b = _keyed("A", mixed_a, 0), _keyed("B", mixed_b, shared)
        rows_kept = holm_verdicts(compare_arms(arm_a, arm_b))
        rows_left = holm_verdicts(compare_arms(*without_shared(arm_a, arm_b)[:2]))
        kept.append(_ctr_effect(rows_kept))
        left.append(_ctr_effect(rows_left))
        found_kept += _better(rows_kept)
        found_left += _better(rows_left)
    return SharedFigures(
        float(np.mean(clean)),
        float(np.mean(kept)),
        float(np.mean(left)),
        found_kept / pairs,
        found_left / pairs,
    )


def _mixed(a: Requests, b: Requests, shared: int, rng: Any) -> tuple[Requests, Requests]:
    """Users 0..shared-1 of both arms are the same people: half of each one's requests
    in either arm move to the other arm under the same user id."""
    import numpy as np

    fields = ("unit", "time", "completed", "shown", "clicked", "latency")
    move_a = (a.unit < shared) & (rng.random(a.unit.size) < 0.5)
    move_b = (b.unit < shared) & (rng.random(b.unit.size) < 0.5)

    def rebuilt(own: Requests, out: Any, other: Requests, into: Any) -> Requests:
        parts: dict[str, Any] = {
            f: np.concatenate([getattr(own, f)[~out], getattr(other, f)[into]]) for f in fields
        }
        return replace(own, **parts)

    return rebuilt(a, move_a, b, move_b), rebuilt(b, move_b, a, move_a)


def _keyed(name: str, requests: Requests, shared_below: int) -> ArmSample:
    """The arm as compare reads it, with unit keys: A's ids as they are, B's moved past
    A's but for users below `shared_below` (the people both arms saw)."""
    import numpy as np

    sample = arm_sample(name, requests)
    present, counts = np.unique(requests.unit, return_counts=True)
    keys = present.astype(np.uint64)
    if name == "B":
        keys = np.where(present < shared_below, keys, keys + np.uint64(_B_KEYS))
    return replace(sample, unit_keys=keys, unit_requests=counts.astype(np.float64))


def _ctr_effect(rows: list[Any]) -> float:
    return next(float(r.effect) for r in rows if r.metric == CTR and r.effect is not None)


def _better(rows: list[Any]) -> int:
    return int(any(r.metric == CTR and r.verdict == Verdict.BETTER for r in rows))
