"""Samples a comparison tests, summed per unit: what the store reads and the statistics take.

A unit is what was randomized (a user, a customer: a split run's assignment unit, the
`unit_id` of a production log). Every array of a sample is aligned to its units: entry i
of a rate's numerator is unit i's clicks, say. A row without a unit is a unit of its own
(one request), so a sample without any unit is analysed per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    IntArray = npt.NDArray[np.int64]
    UIntArray = npt.NDArray[np.uint64]

#: The rate metrics every comparison has, by the names its rows carry.
COMPLETION = "completion rate"
CTR = "CTR"
#: A guarded rollout's guardrail (promptlab/analysis/rollout.py): failed attempts over
#: attempts, retried or not, of the gateway's calls (promptlab/store/unit_samples.py).
ERROR_RATE = "error rate"
#: A scorer's mean score (an accuracy) is the rate `score: NAME` (promptlab/evaluation/).
SCORE_PREFIX = "score: "


@dataclass(frozen=True)
class RatioSample:
    """A rate as per-unit sums: completed over finished, clicks over impressions."""

    num: FloatArray
    den: FloatArray


@dataclass(frozen=True)
class ArmSample:
    """One arm (a variant, a version) of a comparison, per unit."""

    name: str
    #: Distinct units; rows without a unit count one each (see `unitless`).
    units: int
    #: Requests (results, log lines) the arm holds.
    requests: int
    #: Rows that named no unit, each analysed as a unit of its own.
    unitless: int
    #: Per metric name (`completion rate`, `CTR`): the per-unit sums, unit order.
    rates: dict[str, RatioSample]
    #: Latencies (ms) of succeeded requests and the index of each one's unit.
    latency: FloatArray
    latency_unit: IntArray
    #: Per rate metric: the unit's sums in the pre-period (CUPED's covariate), same order.
    pre: dict[str, RatioSample] = field(default_factory=dict)
    #: Each unit's key (a 64-bit hash of its id) and its requests, same order: what finds
    #: a unit seen in both arms (promptlab/analysis/contamination.py). None when the
    #: sample was not read from the store (the A/A harness's).
    unit_keys: UIntArray | None = None
    unit_requests: FloatArray | None = None

    @property
    def per_unit(self) -> bool:
        """True when some rows name a unit: the analysis is per unit, else per request."""
        return self.unitless < self.requests


@dataclass(frozen=True)
class PairedSample:
    """Two variants of an all-mode run over the same inputs, clustered by dataset row
    (repeats of a row share its input, so they are not independent)."""

    name_a: str
    name_b: str
    #: Dataset rows with a (row, repeat) pair both variants finished.
    rows: int
    pairs: int
    #: Per row: pairs both finished, and how many of them each variant completed.
    finished: FloatArray
    completed_a: FloatArray
    completed_b: FloatArray
    #: Latencies of the pairs both succeeded on, with each pair's row index (0-based,
    #: into the arrays above).
    latency_a: FloatArray
    latency_b: FloatArray
    latency_row: IntArray


@dataclass(frozen=True)
class VersionStratum:
    """Where two prompt versions' results lie: one run, on one endpoint and model, with
    the variants of each version there and their results (one side empty when only one
    version ran there)."""

    run_id: str
    endpoint: str
    model: str
    variants_a: tuple[str, ...]
    variants_b: tuple[str, ...]
    results_a: int
    results_b: int

    @property
    def model_name(self) -> str:
        """The endpoint and model, as a spec names them (`sim:fast`, `openai:gpt-4o`)."""
        return f"{self.endpoint}:{self.model}"

    @property
    def shared(self) -> bool:
        """Both versions ran here: a stratum the comparison can be made within."""
        return bool(self.results_a and self.results_b)
