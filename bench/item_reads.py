"""How long the items list and one item's detail take on a run of a million items.

    PYTHONPATH=. .venv/bin/python bench/item_reads.py --rows 500000 --variants 2

Builds the run the way the engine stores one (ItemStore.plan_items, then write_batch
with every item's attempts and final row: most succeeded, some failed after retries),
in a temporary DuckDB file, then times the read models the Runs page and
`promptlab status --items / --item` call. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from promptlab.engine.plan.planner import AllVariants, plan_items  # noqa: E402
from promptlab.records import AttemptRow, FinalRow, VariantRecord, WriteBatch  # noqa: E402
from promptlab.store import ItemStore, ReadModels, RunStore, Store  # noqa: E402

RUN = "run_bench_items"
AT = datetime(2025, 1, 1, tzinfo=UTC)
#: Items per write_batch: the writer commits about 2,000 rows at a time.
WRITE_BATCH = 10_000
#: Every FAIL_EVERY-th item fails after a 429 and a 500; the rest succeed at once.
FAIL_EVERY = 50


def build(store: Store, rows: int, variants: int) -> int:
    names = [f"v{i}" for i in range(variants)]
    records = [
        VariantRecord(i, n, f"p@{i}.0.0", f"sha256:{i}", "sim", "fast", {"max_tokens": 64}, {})
        for i, n in enumerate(names)
    ]
    RunStore(store).create_run(RUN, "bench", {}, records)
    items = ItemStore(store)
    data = ({"text": f"ticket number {i} about billing"} for i in range(rows))
    total = items.plan_items(RUN, plan_items(RUN, data, names, AllVariants(variants), 1))
    after = -1
    while chunk := items.pending_chunk(RUN, after, list(range(variants)), WRITE_BATCH):
        after = chunk[-1].seq
        batch = WriteBatch()
        for item in chunk:
            failed = item.seq % FAIL_EVERY == 0
            tries = 3 if failed else 1
            for n in range(1, tries + 1):
                batch.attempts.append(_attempt(item.key, n, n < tries or failed))
            batch.finals.append(_final(item.key, item.seq, item.row_index, names, item, failed))
        items.write_batch(batch)
    return total


def _attempt(key: str, n: int, error: bool) -> AttemptRow:
    return AttemptRow(
        key=key,
        run_id=RUN,
        attempt=n,
        started_at=AT + timedelta(seconds=n),
        ended_at=AT + timedelta(seconds=n, milliseconds=200),
        outcome="error" if error else "ok",
        error_kind=("rate_limit" if n == 1 else "server") if error else None,
        http_status=(429 if n == 1 else 500) if error else None,
        error_message="boom" if error else None,
        wait_ms=100.0 * (n - 1),
        wait_reason="backoff" if n > 1 else None,
        retry_after_s=1.0 if error else None,
        latency_ms=200.0,
    )


def _final(key: str, seq: int, row: int, names: list[str], item: Any, failed: bool) -> FinalRow:
    return FinalRow(
        key=key,
        run_id=RUN,
        seq=seq,
        row_index=row,
        variant=names[item.variant_index],
        repeat=0,
        status="failed" if failed else "succeeded",
        prompt_version_id="sha256:0",
        endpoint="sim",
        model="fast",
        params={"max_tokens": 64},
        attempts=3 if failed else 1,
        finished_at=AT,
        error_kind="server" if failed else None,
        error_message="boom" if failed else None,
        output_text=None if failed else '{"category": "billing", "priority": "normal"} ' * 4,
        input_tokens=None if failed else 40,
        output_tokens=None if failed else 20,
        latency_ms=None if failed else 200.0 + seq % 100,
    )


def timed(label: str, call: Callable[[], Any], repeats: int) -> None:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    print(f"  {label:<52} best of {repeats}: {best * 1000:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--variants", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.duckdb") as store:
        t0 = time.perf_counter()
        total = build(store, args.rows, args.variants)
        print(f"built {total} items in {time.perf_counter() - t0:.1f} s")
        reads = ReadModels(store)
        last = reads.items(RUN, offset=total - 1, limit=1).rows[0].key
        middle = reads.items(RUN, offset=total // 2, limit=1).rows[0].key
        n = args.repeats
        timed("items: first page of 50", lambda: reads.items(RUN), n)
        timed("items: page 50 at the middle", lambda: reads.items(RUN, offset=total // 2), n)
        timed("items: last page", lambda: reads.items(RUN, offset=total - 50), n)
        timed("items: status=failed, first page", lambda: reads.items(RUN, status="failed"), n)
        timed(
            "items: status=failed, last page",
            lambda: reads.items(RUN, status="failed", offset=total // FAIL_EVERY - 50),
            n,
        )
        timed(
            "items: variant v1 + error_kind server",
            lambda: reads.items(RUN, variant="v1", error_kind="server"),
            n,
        )
        timed("items: search 'number 499999'", lambda: reads.items(RUN, search="number 499999"), n)
        timed("items: search by key prefix", lambda: reads.items(RUN, search=last[:10]), n)
        timed("item_key: resolve a 10-digit prefix", lambda: reads.item_keys(RUN, last[:10]), n)

        def detail(key: str) -> None:
            with reads.snapshot() as snap:
                snap.item_detail(RUN, key)

        timed("item_detail: the middle item (snapshot)", lambda: detail(middle), n)
        timed("item_detail: the last item (snapshot)", lambda: detail(last), n)


if __name__ == "__main__":
    main()
