"""Scores summed up: one scorer's scores of one variant (or prompt version); the mean's
interval is promptlab.analysis.intervals.score_interval."""

from __future__ import annotations

from dataclasses import dataclass


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
