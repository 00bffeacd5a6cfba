"""The planner: which items a run sends, from its dataset rows and variants. Pure.

A planned item is one (dataset row, variant, repeat) with its idempotency key and its
place in the plan (`seq`). Which variants a row goes through is the assignment
strategy's decision: today every row goes through every variant (`AllVariants`, for
paired comparisons); the experiments work adds sticky traffic splits as another
strategy. Nothing here reads the store or the network: rows come in, items go out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from promptlab.records import PlannedChunk, PlannedItem

#: Dataset rows per planned chunk: large enough to insert fast, small enough to stay flat.
PLAN_CHUNK_ROWS = 20_000
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


def plan_items(
    run_id: str,
    rows: Iterable[Mapping[str, Any]],
    variant_names: Sequence[str],
    strategy: AssignmentStrategy,
    repeats: int,
    chunk_rows: int = PLAN_CHUNK_ROWS,
) -> Iterator[PlannedChunk]:
    """The run's items in plan order, `chunk_rows` dataset rows at a time.

    Chunks keep memory flat for any dataset size; `seq` numbers items across chunks.
    """
    seq = 0
    first_row = 0
    chunk: list[Mapping[str, Any]] = []
    items: list[PlannedItem] = []
    for row_index, row in enumerate(rows):
        chunk.append(row)
        for variant_index in strategy.variants_for(row_index, row):
            name = variant_names[variant_index]
            for repeat in range(repeats):
                key = idempotency_key(run_id, row_index, name, repeat)
                items.append(PlannedItem(key, seq, row_index, variant_index, repeat))
                seq += 1
        if len(chunk) >= chunk_rows:
            yield PlannedChunk(first_row, chunk, items)
            first_row += len(chunk)
            chunk, items = [], []
    if chunk:
        yield PlannedChunk(first_row, chunk, items)
