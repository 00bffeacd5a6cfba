"""The review queue's records: rows sent to a person, and cross-check decisions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class ReviewSource(StrEnum):
    """What sent a row to review."""

    CROSSCHECK = "crosscheck"
    CHECK = "check"
    ANOMALY = "anomaly"
    HAND = "hand"


class ReviewStatus(StrEnum):
    OPEN = "open"
    ACCEPTED = "accepted"
    CORRECTED = "corrected"
    REJECTED = "rejected"


@dataclass(frozen=True)
class ReviewItem:
    id: int
    run_id: str
    row_index: int
    #: The one result it was sent for (a failed check, by hand), or None: the row.
    key: str | None
    source: str
    reason: str
    #: The answer on the table: a cross-check's winner, or the result's output.
    proposed: str | None
    status: str
    #: What the person settled on (accepted: the proposed answer; corrected: theirs).
    answer: str | None
    note: str | None
    created_by: str
    created_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    #: Changes so far (decisions and reopens): a decision names the version its decider
    #: saw, and one made on an older version is refused.
    version: int = 0
    #: Who made the latest change (a decision or a reopen), and when.
    changed_by: str | None = None
    changed_at: datetime | None = None


@dataclass(frozen=True)
class ReviewAnswer:
    """One result of a reviewed row: a variant's (a model's) answer and its scores."""

    key: str
    variant: str
    model: str
    status: str
    check_status: str | None
    output: str | None
    error: str | None
    scores: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class CrosscheckRecord:
    """A cross-checked row's decision and every input that made it."""

    run_id: str
    row_index: int
    decision: str
    answer: str | None
    agreement: float
    confidence: float | None
    #: Per model: answer, confidence (raw and normalized), weight and entropy.
    inputs: Mapping[str, Mapping[str, Any]]
    #: The spread of the models' token entropies, and whether it flagged the row.
    entropy_gap: float | None = None
    ambiguous: bool = False
    #: With a tiebreak: the row's chain divergence, and whether its model re-inferred it.
    divergence: float | None = None
    reinferred: bool = False


@dataclass(frozen=True)
class ReviewDetail:
    """What a reviewer sees: the item, the dataset row, each model's answer side by
    side, and the cross-check decision when one sent it."""

    item: ReviewItem
    row: Mapping[str, Any]
    answers: tuple[ReviewAnswer, ...]
    crosscheck: CrosscheckRecord | None


@dataclass(frozen=True)
class WeightRecord:
    variant: str
    validation_run_id: str | None
    f1: float | None
    base_weight: float
    weight: float


@dataclass(frozen=True)
class CrosscheckSummary:
    """A cross-checked run: the models' weights and how many rows each decision got."""

    run_id: str
    weights: tuple[WeightRecord, ...]
    decisions: Mapping[str, int]
    #: Rows its tiebreak model answered again (0 without a tiebreak), and that model.
    reinferred: int = 0
    tiebreak: str | None = None


#: The review list as the CLI prints it (and the server answers it): the items, and how
#: many there are per status.
ReviewList = tuple[list[ReviewItem], dict[str, int]]
