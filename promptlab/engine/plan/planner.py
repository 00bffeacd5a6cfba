"""The planner: which items a run sends, from its dataset rows and variants. Pure.

A planned item is one (dataset row, variant, repeat) with its idempotency key and its
place in the plan (`seq`). Which variants a row goes through is the assignment
strategy's decision: every variant (`AllVariants`, for paired comparisons), or the one
variant an experiment's sticky split gives the row's unit (`StickySplit`, which also
reports each decision so it is stored with the plan). Nothing here reads the store or
the network: rows come in, items go out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from promptlab.errors import SpecError
from promptlab.records import AssignmentRecord, PlannedChunk, PlannedItem

#: Dataset rows per planned chunk: large enough to insert fast, small enough to stay flat.
PLAN_CHUNK_ROWS = 20_000
#: Rows planned between two looks at whether the run was cancelled meanwhile (a look is
#: an attribute read; a 2-million-item plan reads about 17,000 rows a second).
STOP_EVERY_ROWS = 1_000


class PlanStopped(Exception):
    """The run was cancelled while it was being planned: planning stops where it is."""


#: Hex digits of the idempotency key (128 bits): unique in practice, compact in the index.
KEY_HEX_DIGITS = 32


def idempotency_key(run_id: str, row_index: int, variant: str, repeat: int) -> str:
    """Hash of (run, dataset row, variant, repeat): the item's identity everywhere."""
    blob = f"{run_id}\x1f{row_index}\x1f{variant}\x1f{repeat}".encode()
    return hashlib.sha256(blob).hexdigest()[:KEY_HEX_DIGITS]


class AssignmentStrategy(Protocol):
    """Chooses the variants (by index) a dataset row goes through."""

    def variants_for(self, row_index: int, row: Mapping[str, Any]) -> Sequence[int]: ...


@dataclass(frozen=True)
class AllVariants:
    """Every row through every variant: a paired comparison."""

    variant_count: int

    def variants_for(self, row_index: int, row: Mapping[str, Any]) -> Sequence[int]:
        return range(self.variant_count)


@runtime_checkable
class RecordsAssignments(Protocol):
    """A strategy whose decisions are stored with the plan (to check sample ratios later)."""

    def drain_assignments(self) -> list[AssignmentRecord]: ...


class Assigner(Protocol):
    """What a split needs of an experiment: unit id -> (variant, bucket, in experiment)."""

    def __call__(self, unit_id: str) -> tuple[str, int, bool]: ...


class StickySplit:
    """Each row to the one variant its unit (user, session) is assigned by the experiment.

    The same unit gets the same variant in every run and in live traffic, because the
    assignment is a pure function of the experiment's config and the unit id.
    """

    def __init__(
        self,
        experiment: str,
        revision: int,
        assign: Assigner,
        unit_column: str,
        variant_names: Sequence[str],
    ) -> None:
        self.experiment = experiment
        self.revision = revision
        self._assign = assign
        self.unit_column = unit_column
        self._index = {name: i for i, name in enumerate(variant_names)}
        self._decided: list[AssignmentRecord] = []

    def variants_for(self, row_index: int, row: Mapping[str, Any]) -> Sequence[int]:
        unit = unit_id_of(row, self.unit_column, row_index)
        variant, bucket, in_experiment = self._assign(unit)
        self._decided.append(
            AssignmentRecord(
                self.experiment, self.revision, unit, row_index, variant, bucket, in_experiment
            )
        )
        return (self._index[variant],)

    def drain_assignments(self) -> list[AssignmentRecord]:
        decided, self._decided = self._decided, []
        return decided


class SkipRows:
    """Another strategy, minus the rows that fail the variables check (no items for them)."""

    def __init__(self, inner: AssignmentStrategy, skipped: frozenset[int]) -> None:
        self.inner = inner
        #: Row indexes (0-based, like `row_index`) that get no items.
        self.skipped = skipped

    def variants_for(self, row_index: int, row: Mapping[str, Any]) -> Sequence[int]:
        if row_index in self.skipped:
            return ()
        return self.inner.variants_for(row_index, row)

    def drain_assignments(self) -> list[AssignmentRecord]:
        return self.inner.drain_assignments() if isinstance(self.inner, RecordsAssignments) else []


def unit_id_of(row: Mapping[str, Any], column: str, row_index: int) -> str:
    """The row's unit id as text; a row without one cannot be assigned (SpecError)."""
    value = row.get(column)
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not value.strip()):
        raise SpecError(f"dataset row {row_index + 1}: no unit id in column {column!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 12.0 from a typed column is the same unit as "12"
    return str(value)


def plan_items(
    run_id: str,
    rows: Iterable[Mapping[str, Any]],
    variant_names: Sequence[str],
    strategy: AssignmentStrategy,
    repeats: int,
    chunk_rows: int = PLAN_CHUNK_ROWS,
    stop: Callable[[], bool] | None = None,
) -> Iterator[PlannedChunk]:
    """The run's items in plan order, `chunk_rows` dataset rows at a time.

    Chunks keep memory flat for any dataset size; `seq` numbers items across chunks.
    `stop` is asked every STOP_EVERY_ROWS rows: true, PlanStopped is raised.
    """
    seq = 0
    first_row = 0
    chunk: list[Mapping[str, Any]] = []
    items: list[PlannedItem] = []
    recorded = strategy if isinstance(strategy, RecordsAssignments) else None
    for row_index, row in enumerate(rows):
        if stop is not None and row_index % STOP_EVERY_ROWS == 0 and stop():
            raise PlanStopped(f"run {run_id}: cancelled while planned, at row {row_index}")
        chunk.append(row)
        for variant_index in strategy.variants_for(row_index, row):
            name = variant_names[variant_index]
            for repeat in range(repeats):
                key = idempotency_key(run_id, row_index, name, repeat)
                items.append(PlannedItem(key, seq, row_index, variant_index, repeat))
                seq += 1
        if len(chunk) >= chunk_rows:
            if stop is not None and stop():  # not written, when cancelled while it was made
                raise PlanStopped(f"run {run_id}: cancelled while planned, at row {row_index}")
            yield PlannedChunk(first_row, chunk, items, _drain(recorded))
            first_row += len(chunk)
            chunk, items = [], []
    if chunk:
        yield PlannedChunk(first_row, chunk, items, _drain(recorded))


def _drain(strategy: RecordsAssignments | None) -> list[AssignmentRecord]:
    return strategy.drain_assignments() if strategy is not None else []
