"""How long the metrics table and a compare take over a million results.

    PYTHONPATH=. .venv/bin/python bench/metrics.py --rows 500000

Builds one run of `--rows` dataset rows through two variants (an all-mode A/B: a
million results at the default; bench/_fill.py) in a temporary DuckDB file. Then times:

- `wb.analysis.metrics(run_id=...)` (per variant) and `metrics(prompt=...)` (per version
  across runs), against a baseline that fetches the same columns into pandas and
  aggregates there (groupby + quantiles);
- the same two metrics calls again with a feedback event per result and clicks on about
  a fifth (CTR joined per variant and per version);
- `wb.analysis.compare` on the run as stored (all-mode: McNemar, Wilcoxon on the pairs,
  three bootstraps) and as a split run (two proportions, Mann-Whitney), and the parts:
  fetching latencies as NumPy arrays, one bootstrap, Mann-Whitney, Wilcoxon.

Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._fill import (  # noqa: E402
    RUN,
    add_feedback,
    bench_workbench,
    build_timed,
    pandas_baseline,
    timed,
)
from promptlab.analysis.stats import bootstrap_quantile_diff, mann_whitney, wilcoxon_paired  # noqa: E402
from promptlab.store.metrics import MetricsReads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=500_000, help="dataset rows (x2 results)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.repeats
    with (
        tempfile.TemporaryDirectory() as tmp,
        bench_workbench(Path(tmp) / "bench.duckdb") as (store, wb),
    ):
        build_timed(wb, args.rows)
        print("metrics table")
        ours = timed(
            "wb.analysis.metrics(run_id) (DuckDB)", lambda: wb.analysis.metrics(run_id=RUN), n
        )
        base = timed(
            "baseline: fetch to pandas, groupby + quantiles", lambda: pandas_baseline(store), n
        )
        print(f"  -> baseline / DuckDB: {base / ours:.1f}x")
        timed(
            "wb.analysis.metrics(prompt='bench', since='7d')",
            lambda: wb.analysis.metrics(prompt="bench", since="7d"),
            n,
        )
        timed("wb.analysis.metrics() (every version)", lambda: wb.analysis.metrics(), n)
        t0 = time.perf_counter()
        events = add_feedback(store)
        print(f"added {events} feedback events in {time.perf_counter() - t0:.1f} s")
        timed(
            "wb.analysis.metrics(run_id) with feedback (CTR)",
            lambda: wb.analysis.metrics(run_id=RUN),
            n,
        )
        timed(
            "wb.analysis.metrics(prompt='bench', since='7d') with feedback",
            lambda: wb.analysis.metrics(prompt="bench", since="7d"),
            n,
        )
        print("compare")
        timed("wb.analysis.compare: all-mode (paired tests)", lambda: wb.analysis.compare(RUN), n)
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
        timed(
            "wb.analysis.compare: as a split run (Mann-Whitney)",
            lambda: wb.analysis.compare(RUN),
            n,
        )
        comparison = wb.analysis.compare(RUN)
        for row in comparison.rows:
            interval = row.interval
            span = f"[{interval.low:+.2f}, {interval.high:+.2f}]" if interval else "-"
            print(
                f"    {row.metric:<16} effect {row.effect:+.4f} {span} p={row.p_value:.3g} "
                f"adj={row.adjusted_p:.3g} {row.test}: {row.verdict}"
            )


if __name__ == "__main__":
    main()
