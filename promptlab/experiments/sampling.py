"""Sampling strategies: how a variant's temperature or top_p moves over a batch. Pure.

A variant may hold a sampling param fixed (the default), let it decay linearly from
one bound to another over the batch, or swing it on a cosine schedule around a base,
clipped to bounds. The position is the item's place in the dataset (row x repeats +
repeat, out of rows x repeats), so every variant sweeps the same schedule whatever the
others do, and a resumed run sends every item the value it would have had; the value
used is stored with the item's result (its `params`).

```yaml
sampling: {strategy: linear_decay, param: temperature, start: 1.0, end: 0.2}
sampling: {strategy: cosine, param: top_p, base: 0.9, amplitude: 0.1, period: 200,
           min: 0.7, max: 1.0}
```
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from promptlab.errors import SpecError

#: Where a variant's record keeps its sampling strategy among its params.
SAMPLING_KEY = "sampling"
#: The params a strategy may move, with their allowed ranges (as templates allow).
PARAM_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0)}
FIXED, LINEAR_DECAY, COSINE = "fixed", "linear_decay", "cosine"
_FIELDS = {
    FIXED: frozenset({"strategy"}),
    LINEAR_DECAY: frozenset({"strategy", "param", "start", "end"}),
    COSINE: frozenset({"strategy", "param", "base", "amplitude", "period", "min", "max"}),
}
_DEFAULT_PARAM = {LINEAR_DECAY: "temperature", COSINE: "top_p"}


@dataclass(frozen=True)
class Sampling:
    """A checked strategy; `value_at` gives the param's value for one item."""

    strategy: str = FIXED
    param: str | None = None
    start: float = 0.0
    end: float = 0.0
    base: float = 0.0
    amplitude: float = 0.0
    #: Items per cosine cycle; None: one cycle over the whole run.
    period: int | None = None
    low: float = 0.0
    high: float = 0.0

    def value_at(self, seq: int, total: int) -> float | None:
        """The param's value at position `seq` of `total` (see above); None if fixed."""
        if self.strategy == LINEAR_DECAY:
            fraction = seq / (total - 1) if total > 1 else 0.0
            return round(self.start + (self.end - self.start) * min(max(fraction, 0.0), 1.0), 6)
        if self.strategy == COSINE:
            period = self.period or max(total, 1)
            value = self.base + self.amplitude * math.cos(2 * math.pi * seq / period)
            return round(min(max(value, self.low), self.high), 6)
        return None

    def apply(self, params: Mapping[str, Any], seq: int, total: int) -> Mapping[str, Any]:
        """`params` with the strategy's value for this item (unchanged when fixed)."""
        value = self.value_at(seq, total)
        if value is None or self.param is None:
            return params
        return {**params, self.param: value}


def parse_sampling(data: Any, where: str) -> Sampling:
    """Check a `sampling:` mapping; errors name the field (`variants[1].sampling.end`)."""
    where = f"{where}.sampling"
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: expected a mapping with a 'strategy'")
    strategy = data.get("strategy", FIXED)
    if strategy not in _FIELDS:
        raise SpecError(f"{where}.strategy: one of {', '.join(_FIELDS)}, got {strategy!r}")
    unknown = sorted(set(data) - _FIELDS[strategy])
    if unknown:
        allowed = ", ".join(sorted(_FIELDS[strategy]))
        raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {allowed})")
    if strategy == FIXED:
        return Sampling()
    param = data.get("param", _DEFAULT_PARAM[strategy])
    if param not in PARAM_RANGES:
        raise SpecError(f"{where}.param: one of {', '.join(PARAM_RANGES)}, got {param!r}")
    low, high = PARAM_RANGES[param]
    if strategy == LINEAR_DECAY:
        return Sampling(
            LINEAR_DECAY,
            param,
            start=_in_range(data, "start", where, low, high),
            end=_in_range(data, "end", where, low, high),
        )
    clip_low = _in_range(data, "min", where, low, high, default=low)
    clip_high = _in_range(data, "max", where, low, high, default=high)
    if clip_low > clip_high:
        raise SpecError(f"{where}: min ({clip_low:g}) is above max ({clip_high:g})")
    period = data.get("period")
    if period is not None and (
        isinstance(period, bool) or not isinstance(period, int) or period < 2
    ):
        raise SpecError(
            f"{where}.period: expected a whole number of items (2 or more), got {period!r}"
        )
    amplitude = _number(data.get("amplitude", 0.0), f"{where}.amplitude")
    if amplitude < 0:
        raise SpecError(f"{where}.amplitude: expected 0 or more, got {amplitude:g}")
    return Sampling(
        COSINE,
        param,
        base=_in_range(data, "base", where, low, high),
        amplitude=amplitude,
        period=period,
        low=clip_low,
        high=clip_high,
    )


def sampling_from_params(params: Mapping[str, Any]) -> Sampling | None:
    """The strategy stored among a variant record's params, if any (already checked)."""
    data = params.get(SAMPLING_KEY)
    if not data:
        return None
    sampling = parse_sampling(data, "variant")
    return None if sampling.strategy == FIXED else sampling


def _in_range(
    data: Mapping[str, Any],
    key: str,
    where: str,
    low: float,
    high: float,
    default: float | None = None,
) -> float:
    if key not in data and default is not None:
        return default
    if key not in data:
        raise SpecError(f"{where}.{key}: required")
    value = _number(data[key], f"{where}.{key}")
    if not low <= value <= high:
        raise SpecError(f"{where}.{key}: expected a number from {low:g} to {high:g}, got {value:g}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(f"{where}: expected a number, got {value!r}")
    return float(value)
