"""Scores summed up: one scorer's scores of one variant (or prompt version)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from promptlab.analysis.stats import Interval, wilson_interval

#: z of a 95% interval.
_Z95 = 1.959963984540054


@dataclass(frozen=True)
class ScoreCounts:
    """How many results a scorer scored, their sum, and why some are 0 or not scored."""

    #: The variant of a run, or `name@semver` of a version across runs.
    label: str
    scorer: str
    scored: int
    total: float
    total_squares: float
    #: Scores of exactly 1 (right).
    right: int
    no_output: int
    malformed: int
    no_expected: int
    #: A judge's call failed or gave no verdict: not scored.
    not_judged: int
    #: True when every score is 0 or 1: the mean is an accuracy, its interval Wilson's.
    binary: bool

    @property
    def mean(self) -> float | None:
        return self.total / self.scored if self.scored else None

    @property
    def interval(self) -> Interval | None:
        """95%: Wilson's for an accuracy, else the normal one of the mean score."""
        if not self.scored:
            return None
        if self.binary:
            return wilson_interval(self.right, self.scored)
        mean = self.total / self.scored
        variance = max(0.0, self.total_squares / self.scored - mean * mean)
        half = _Z95 * math.sqrt(variance / self.scored) if self.scored > 1 else 1.0
        return Interval(max(0.0, mean - half), min(1.0, mean + half))
