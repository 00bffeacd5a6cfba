"""How long the metrics table and a compare take over a million results.

    PYTHONPATH=. .venv/bin/python bench/metrics.py --rows 500000

Builds one run of `--rows` dataset rows through two variants (an all-mode A/B: a
million results at the default) the way the engine stores one (ItemStore.plan_items,
then write_batch with final rows only: most succeeded with lognormal latencies, B a
little slower; 2% failed with a kind), in a temporary DuckDB file. Then times:

- `Workbench.metrics(run_id=...)` (per variant) and `metrics(prompt=...)` (per version
  across runs), against a baseline that fetches the same columns into pandas and
  aggregates there (groupby + quantiles);
- the same two metrics calls again with a feedback event per result and clicks on about
  a fifth (CTR joined per variant and per version);
- `Workbench.compare` on the run as stored (all-mode: McNemar, Wilcoxon on the pairs,
  three bootstraps) and as a split run (two proportions, Mann-Whitney), and the parts:
  fetching latencies as NumPy arrays, one bootstrap, Mann-Whitney, Wilcoxon.

Not a test: it asserts nothing.
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from promptlab.config import Settings  # noqa: E402
from promptlab.engine.planner import AllVariants, plan_items  # noqa: E402
from promptlab.records import FinalRow, VariantRecord, WriteBatch  # noqa: E402
from promptlab.stats import bootstrap_quantile_diff, mann_whitney, wilcoxon_paired  # noqa: E402
from promptlab.store import ItemStore, RunStore, Store  # noqa: E402
from promptlab.store.metrics import MetricsReads  # noqa: E402
from promptlab.templates import Template  # noqa: E402
from promptlab.workbench import Workbench  # noqa: E402

RUN = "run_bench_metrics"
AT = datetime.now(UTC) - timedelta(days=1)
WRITE_BATCH = 20_000
FAIL_EVERY = 50


def build(wb: Workbench, rows: int) -> int:
    store = wb.store
    template = Template.build([{"role": "user", "content": "Triage {{ text }}"}])
    first = wb.create_prompt("bench", template).version
    second = wb.save_version(
        "bench", Template.build([{"role": "user", "content": "Triage briefly {{ text }}"}])
    ).version
    names = ["control", "candidate"]
    records = [
        VariantRecord(i, n, f"bench@{v.semver}", v.id, "sim", "fast", {"max_tokens": 64}, {})
        for i, (n, v) in enumerate(zip(names, (first, second), strict=True))
    ]
    RunStore(store).create_run(RUN, "bench", {"variants": names}, records)
    items = ItemStore(store)
    data = ({"text": f"ticket number {i} about billing"} for i in range(rows))
    total = items.plan_items(RUN, plan_items(RUN, data, names, AllVariants(2), 1))
    rng = np.random.default_rng(0)
    after = -1
    while chunk := items.pending_chunk(RUN, after, [0, 1], WRITE_BATCH):
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
                    variant=names[item.variant_index],
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
                )  # fmt: skip
            )
        items.write_batch(batch)
    return total


def add_feedback(store: Store) -> int:
    """An impression for every result and a click for about one in five (more for the
    candidate): as many feedback events as results, and then some."""
    with store.transaction() as tx:
        tx.execute(
            "INSERT INTO feedback SELECT idempotency_key, run_id, prompt_version_id, variant, "
            "NULL, 'impression', 1, finished_at, 'bench', now() FROM results WHERE run_id = ?",
            [RUN],
        )
        tx.execute(
            "INSERT INTO feedback SELECT idempotency_key, run_id, prompt_version_id, variant, "
            "NULL, 'click', 1, finished_at, 'bench', now() FROM results WHERE run_id = ? "
            "AND hash(idempotency_key) % 100 < CASE variant WHEN 'control' THEN 20 ELSE 23 END",
            [RUN],
        )
        row = tx.execute("SELECT count(*) FROM feedback").fetchone()
    return int(row[0]) if row else 0


def timed(label: str, call: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    print(f"  {label:<58} best of {repeats}: {best * 1000:9.1f} ms")
    return best


def pandas_baseline(store: Store) -> Any:
    """The per-variant table computed in pandas after fetching the rows it needs."""
    with store.read() as cur:
        frame = cur.execute(
            "SELECT variant, status, error_kind, latency_ms, input_tokens, output_tokens, "
            "cost_usd FROM results WHERE run_id = ?",
            [RUN],
        ).df()
    groups = frame.groupby("variant")
    ok = frame[frame.status == "succeeded"].groupby("variant")
    return (
        groups.size(),
        groups.status.apply(lambda s: (s == "succeeded").sum()),
        frame[frame.status == "failed"].groupby(["variant", "error_kind"]).size(),
        ok.latency_ms.mean(),
        ok.latency_ms.quantile([0.5, 0.9, 0.95, 0.99]),
        groups[["input_tokens", "output_tokens", "cost_usd"]].sum(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=500_000, help="dataset rows (x2 results)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        settings = Settings.from_env({"PROMPTLAB_DB": str(path), "PROMPTLAB_AUTHOR": "bench"})
        with Store(path) as store, Workbench(store, settings) as wb:
            t0 = time.perf_counter()
            total = build(wb, args.rows)
            print(f"built {total} results in {time.perf_counter() - t0:.1f} s")
            print("metrics table")
            ours = timed("Workbench.metrics(run_id) (DuckDB)", lambda: wb.metrics(run_id=RUN), n)
            base = timed(
                "baseline: fetch to pandas, groupby + quantiles", lambda: pandas_baseline(store), n
            )
            print(f"  -> baseline / DuckDB: {base / ours:.1f}x")
            timed(
                "Workbench.metrics(prompt='bench', since='7d')",
                lambda: wb.metrics(prompt="bench", since="7d"),
                n,
            )
            timed("Workbench.metrics() (every version)", lambda: wb.metrics(), n)
            t0 = time.perf_counter()
            events = add_feedback(store)
            print(f"added {events} feedback events in {time.perf_counter() - t0:.1f} s")
            timed(
                "Workbench.metrics(run_id) with feedback (CTR)", lambda: wb.metrics(run_id=RUN), n
            )
            timed(
                "Workbench.metrics(prompt='bench', since='7d') with feedback",
                lambda: wb.metrics(prompt="bench", since="7d"),
                n,
            )
            print("compare")
            timed("Workbench.compare: all-mode (paired tests)", lambda: wb.compare(RUN), n)
            reads = MetricsReads(store)
            xa = reads.latencies(RUN, "control")
            xb = reads.latencies(RUN, "candidate")
            print(f"  ({xa.size} and {xb.size} latencies per arm)")
            timed(
                "  fetch both arms' latencies (fetchnumpy)",
                lambda: (reads.latencies(RUN, "control"), reads.latencies(RUN, "candidate")),
                n,
            )
            timed(
                "  fetch the paired latencies (join)",
                lambda: reads.paired_latencies(RUN, "control", "candidate"),
                n,
            )
            timed(
                "  paired completion counts (join)",
                lambda: reads.paired_completion(RUN, "control", "candidate"),
                n,
            )
            timed(
                "  one bootstrap of the p99 difference (2,000 draws)",
                lambda: bootstrap_quantile_diff(xa, xb, 0.99),
                n,
            )
            pa, pb = reads.paired_latencies(RUN, "control", "candidate")
            timed("  Wilcoxon signed-rank on the pairs", lambda: wilcoxon_paired(pa, pb), n)
            timed("  Mann-Whitney U", lambda: mann_whitney(xa, xb), n)

            def naive_bootstrap() -> None:
                # Resampling indexes, 50 draws at a time (bounded memory): for scale only.
                rng = np.random.default_rng(0)
                for _ in range(200 // 50):
                    idx = rng.integers(0, xa.size, (50, xa.size))
                    np.quantile(xa[idx], 0.99, axis=1)

            slow = timed(
                "  for scale: 200 draws (of 2,000) resampling indexes, one arm", naive_bootstrap, 1
            )
            print(f"  -> 2,000 draws x 2 arms that way: about {slow * 20:.0f} s")
            with store.transaction() as cur:
                cur.execute("UPDATE runs SET spec = ? WHERE run_id = ?", ['{"mode": "split"}', RUN])
            timed("Workbench.compare: as a split run (Mann-Whitney)", lambda: wb.compare(RUN), n)
            comparison = wb.compare(RUN)
            for row in comparison.rows:
                interval = row.interval
                span = f"[{interval.low:+.2f}, {interval.high:+.2f}]" if interval else "-"
                print(
                    f"    {row.metric:<16} effect {row.effect:+.4f} {span} p={row.p_value:.3g} "
                    f"adj={row.adjusted_p:.3g} {row.test}: {row.verdict}"
                )


if __name__ == "__main__":
    main()
