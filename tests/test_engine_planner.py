"""The planner: items from rows x variants x repeats, keys and sequence numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promptlab.engine.plan.planner import AllVariants, idempotency_key, plan_items

ROWS = [{"text": f"row {i}"} for i in range(5)]


def test_all_variants_sends_every_row_through_every_variant_repeats_times() -> None:
    chunks = list(plan_items("run_x", ROWS, ["a", "b"], AllVariants(2), repeats=3, chunk_rows=2))
    assert [(c.first_row, len(c.rows), len(c.items)) for c in chunks] == [
        (0, 2, 12),
        (2, 2, 12),
        (4, 1, 6),
    ]
    items = [i for c in chunks for i in c.items]
    assert [i.seq for i in items] == list(range(30))
    assert {(i.row_index, i.variant_index, i.repeat) for i in items} == {
        (r, v, k) for r in range(5) for v in range(2) for k in range(3)
    }
    assert items[0].key == idempotency_key("run_x", 0, "a", 0)
    assert len({i.key for i in items}) == 30


def test_a_strategy_chooses_the_variants_of_each_row() -> None:
    class EvenOdd:
        def variants_for(self, row_index: int, row: Mapping[str, Any]) -> Sequence[int]:
            return [row_index % 2]

    items = [
        i
        for c in plan_items("run_x", ROWS, ["a", "b"], EvenOdd(), repeats=1, chunk_rows=10)
        for i in c.items
    ]
    assert [(i.row_index, i.variant_index) for i in items] == [
        (0, 0),
        (1, 1),
        (2, 0),
        (3, 1),
        (4, 0),
    ]


def test_keys_depend_on_run_row_variant_and_repeat() -> None:
    base = idempotency_key("run_x", 1, "a", 0)
    others = [
        idempotency_key("run_y", 1, "a", 0),
        idempotency_key("run_x", 2, "a", 0),
        idempotency_key("run_x", 1, "b", 0),
        idempotency_key("run_x", 1, "a", 1),
    ]
    assert base not in others and len(base) == 32
