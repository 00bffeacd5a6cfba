"""Units seen under both versions: counted, left out of the comparison, reported.

A unit (a user, a customer) that met both arms breaks the comparison's premise that
each unit saw one version: whatever it did reflects both, and it sits in both samples,
so the arms are no longer independent. It happens when a split is re-weighted or ramped
mid-flight, when an experiment's unit id is shared across experiments, or when
production logs mix traffic from two rollouts. Such units are left out of both arms by
default (`keep_shared` keeps them) and the comparison says how many there were.

Only independent arms are checked: in an all-mode run every row meets every variant
by design, and those comparisons are paired instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from promptlab.records.unit_samples import ArmSample

    UIntArray = npt.NDArray[np.uint64]


def shared_units(a: ArmSample, b: ArmSample) -> int:
    """How many units both arms hold (0 when either was not read from the store)."""
    import numpy as np

    if a.unit_keys is None or b.unit_keys is None:
        return 0
    return int(np.intersect1d(a.unit_keys, b.unit_keys, assume_unique=True).size)


def without_shared(a: ArmSample, b: ArmSample) -> tuple[ArmSample, ArmSample, int]:
    """Both arms without the units they share, and how many those were."""
    import numpy as np

    count = shared_units(a, b)
    if not count:
        return a, b, 0
    assert a.unit_keys is not None and b.unit_keys is not None
    both = np.intersect1d(a.unit_keys, b.unit_keys, assume_unique=True)
    return _dropped(a, both), _dropped(b, both), count


def shared_note(count: int, names: tuple[str, str], kept: bool = False) -> str:
    """The one-line warning a comparison carries when units met both arms."""
    a, b = names
    plural = "s were" if count != 1 else " was"
    if kept:
        return (
            f"{count} unit{plural} seen under both {a} and {b}: kept in both arms as asked, "
            "so the arms are not independent"
        )
    return (
        f"{count} unit{plural} seen under both {a} and {b} and left out of the "
        "comparison (a unit must see one version; --keep-shared keeps them)"
    )


def _dropped(arm: ArmSample, shared: UIntArray) -> ArmSample:
    """The arm without the units in `shared` (unit keys), every per-unit array cut alike
    and the latencies' unit index renumbered."""
    import numpy as np

    assert arm.unit_keys is not None
    keep = ~np.isin(arm.unit_keys, shared, assume_unique=True)
    renumbered = np.cumsum(keep) - 1
    timed = keep[arm.latency_unit]
    rates = {name: type(r)(r.num[keep], r.den[keep]) for name, r in arm.rates.items()}
    pre = {name: type(r)(r.num[keep], r.den[keep]) for name, r in arm.pre.items()}
    requests = arm.unit_requests[keep] if arm.unit_requests is not None else None
    dropped_requests = int(arm.unit_requests[~keep].sum()) if arm.unit_requests is not None else 0
    kept_units = int((requests > 0).sum()) if requests is not None else int(keep.sum())
    return replace(
        arm,
        units=kept_units,
        requests=arm.requests - dropped_requests,
        rates=rates,
        pre=pre,
        latency=arm.latency[timed],
        latency_unit=renumbered[arm.latency_unit[timed]],
        unit_keys=arm.unit_keys[keep],
        unit_requests=requests,
    )
