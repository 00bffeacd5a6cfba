"""Fills shared by the benches: a million results stored the way the engine stores
them, feedback on them, and a timer.

`build` writes one run of `rows` dataset rows through two variants, as an all-mode A/B
(every row to both: two results a row) or as a split run of an experiment like the demo
one (control 70 / candidate 30, sticky per unit, with its `assignments`, so the SRM check
runs: one result a row). It goes through ItemStore.plan_items, then write_batch with
final rows only: most succeeded with lognormal latencies, the candidate a little slower;
2% failed with a kind.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from promptlab.config import Settings
from promptlab.engine.plan.planner import AllVariants, AssignmentStrategy, StickySplit, plan_items
from promptlab.experiments import assign
from promptlab.prompts.templates import Template
from promptlab.records import FinalRow, VariantRecord, WriteBatch
from promptlab.store import ItemStore, RunStore, Store
from promptlab.workbench import Workbench

RUN = "run_bench_metrics"
AT = datetime.now(UTC) - timedelta(days=1)
WRITE_BATCH = 20_000
FAIL_EVERY = 50
NAMES = ["control", "candidate"]
#: The split run's experiment: the demo's shape (70 / 30, sticky per unit).
SPLIT_WEIGHTS = (70, 30)


def bench_env(path: Path) -> dict[str, str]:
    """The environment every bench opens its database with, as the app would."""
    return {"PROMPTLAB_DB": str(path), "PROMPTLAB_AUTHOR": "bench"}


@contextmanager
def bench_workbench(path: Path) -> Iterator[tuple[Store, Workbench]]:
    """The store at `path` and a workbench over it, closed afterwards."""
    with Store(path) as store, Workbench(store, Settings.from_env(bench_env(path))) as wb:
        yield store, wb


def build_timed(wb: Workbench, rows: int, split: bool = False) -> int:
    """`build`, saying how many results and how long it took."""
    t0 = time.perf_counter()
    total = build(wb, rows, split)
    what = " (split run)" if split else ""
    print(f"built {total} results{what} in {time.perf_counter() - t0:.1f} s")
    return total


def build(wb: Workbench, rows: int, split: bool = False) -> int:
    """Store the run; returns how many results it has."""
    store = wb.store
    template = Template.build([{"role": "user", "content": "Triage {{ text }}"}])
    first = wb.prompts.create("bench", template).version
    second = wb.prompts.save_version(
        "bench", Template.build([{"role": "user", "content": "Triage briefly {{ text }}"}])
    ).version
    records = [
        VariantRecord(i, n, f"bench@{v.semver}", v.id, "sim", "fast", {"max_tokens": 64}, {})
        for i, (n, v) in enumerate(zip(NAMES, (first, second), strict=True))
    ]
    spec: dict[str, Any] = {"variants": NAMES}
    strategy: AssignmentStrategy = AllVariants(2)
    if split:
        config, _ = wb.experiments.add(
            {
                "name": "bench-split",
                "mode": "split",
                "unit_column": "unit",
                "variants": [
                    {
                        "name": name,
                        "prompt": f"bench@{v.semver}",
                        "weight": weight,
                        "control": name == NAMES[0],
                    }
                    for name, v, weight in zip(NAMES, (first, second), SPLIT_WEIGHTS, strict=True)
                ],
            }
        )
        spec = {"mode": "split", "unit_column": "unit", "experiment": config.to_dict()}

        def assigner(unit_id: str) -> tuple[str, int, bool]:
            decided = assign(config, unit_id)
            return decided.variant, decided.bucket, decided.in_experiment

        strategy = StickySplit(config.name, config.revision, assigner, "unit", NAMES)
    RunStore(store).create_run(RUN, "bench", spec, records)
    items = ItemStore(store)
    data = ({"text": f"ticket number {i} about billing", "unit": f"u{i}"} for i in range(rows))
    total = items.plan_items(RUN, plan_items(RUN, data, NAMES, strategy, 1))
    rng = np.random.default_rng(0)
    after = -1
    variants = [0, 1]
    while chunk := items.pending_chunk(RUN, after, variants, WRITE_BATCH):
        after = chunk[-1].seq
        scale = np.array([0.0, 0.02])
        draws = rng.lognormal(7.0, 0.35, len(chunk))
        batch = WriteBatch()
        for item, draw in zip(chunk, draws, strict=True):
            # Both fail 2%; the candidate a little more (another 0.7%).
            failed = item.seq % FAIL_EVERY < 2 or (item.variant_index == 1 and item.seq % 137 == 0)
            version = (first, second)[item.variant_index]
            batch.finals.append(
                FinalRow(
                    key=item.key,
                    run_id=RUN,
                    seq=item.seq,
                    row_index=item.row_index,
                    variant=NAMES[item.variant_index],
                    repeat=item.repeat,
                    status="failed" if failed else "succeeded",
                    prompt_version_id=version.id,
                    endpoint="sim",
                    model="fast",
                    params={},
                    attempts=1,
                    finished_at=AT + timedelta(milliseconds=item.seq),
                    error_kind=("server" if item.seq % 3 else "timeout") if failed else None,
                    output_text=None if failed else '{"category": "billing"}',
                    input_tokens=None if failed else 40,
                    output_tokens=None if failed else 12,
                    latency_ms=None if failed else float(draw * np.exp(scale[item.variant_index])),
                    cost_usd=None if failed else 0.00002,
                )
            )
        items.write_batch(batch)
    return total


def add_feedback(store: Store, impressions_per_6: int = 6) -> int:
    """An impression for `impressions_per_6` results in six (all by default) and a click
    on about one in five of those (more for the candidate), in one INSERT ... SELECT.
    Returns the feedback table's row count."""
    shown = "FROM results WHERE run_id = ? AND hash(idempotency_key || 'shown') % 6 < ?"
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO feedback (idempotency_key, run_id, prompt_version_id, variant, "
            "unit_id, kind, value, event_time, source, imported_at) "
            "SELECT idempotency_key, run_id, prompt_version_id, variant, NULL, 'impression', 1, "
            f"finished_at, 'bench', now() {shown} "
            "UNION ALL "
            "SELECT idempotency_key, run_id, prompt_version_id, variant, NULL, 'click', 1, "
            f"finished_at, 'bench', now() {shown} "
            "AND hash(idempotency_key) % 100 < CASE variant WHEN 'control' THEN 20 ELSE 23 END",
            [RUN, impressions_per_6, RUN, impressions_per_6],
        )
        row = tx.execute("SELECT count(*) FROM feedback").fetchone()
    return int(row[0]) if row else 0


def timed(label: str, call: Callable[[], Any], repeats: int) -> float:
    """Run `call` `repeats` times; print the best and the median; return the best (s)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    best, median = min(times), statistics.median(times)
    print(f"  {label:<58} best of {repeats}: {best * 1000:9.1f} ms, median {median * 1000:9.1f} ms")
    return best


def pandas_baseline(store: Store, with_feedback: bool = False) -> Any:
    """The per-variant table computed in pandas after fetching the rows it needs (and,
    `with_feedback`, impressions and clicks per variant, a click counted once per result)."""
    with store.read() as cur:
        frame = cur.execute(
            "SELECT idempotency_key, variant, status, error_kind, latency_ms, input_tokens, "
            "output_tokens, cost_usd FROM results WHERE run_id = ?",
            [RUN],
        ).df()
        events = (
            cur.execute(
                "SELECT idempotency_key, variant, kind FROM feedback WHERE run_id = ?", [RUN]
            ).df()
            if with_feedback
            else None
        )
    groups = frame.groupby("variant")
    ok = frame[frame.status == "succeeded"].groupby("variant")
    table = (
        groups.size(),
        groups.status.apply(lambda s: (s == "succeeded").sum()),
        frame[frame.status == "failed"].groupby(["variant", "error_kind"]).size(),
        ok.latency_ms.mean(),
        ok.latency_ms.quantile([0.5, 0.9, 0.95, 0.99]),
        groups[["input_tokens", "output_tokens", "cost_usd"]].sum(),
    )
    if events is None:
        return table
    per_result = events.drop_duplicates(["idempotency_key", "kind"])
    return table, per_result.groupby(["variant", "kind"]).size()
