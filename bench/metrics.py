"""How long the metrics table and a compare take over a million results.

    PYTHONPATH=. .venv/bin/python bench/metrics.py --rows 500000

Builds one run of `--rows` dataset rows through two variants (an all-mode A/B: a
million results at the default; bench/_fill.py) in a temporary DuckDB file. Then times:

- `wb.analysis.metrics(run_id=...)` (per variant) and `metrics(prompt=...)` (per version
  across runs), against a baseline that fetches the same columns into pandas and
  aggregates there (groupby + quantiles);
- the same two metrics calls again with a feedback event per result and clicks on about
  a fifth (CTR joined per variant and per version);
- `wb.analysis.compare` on the run as stored (all-mode: pairs clustered by row) and as
  a split run (no assignments here, so per request), and the parts: the per-unit
  sample reads and the delta-method effects, against a baseline that estimates one
  percentile's standard error by a bootstrap of units (200 draws).

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
from promptlab.analysis.compare import compare_arms, compare_paired  # noqa: E402
from promptlab.store.unit_samples import SampleReads  # noqa: E402


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
        samples = SampleReads(store)
        timed(
            "  read both arms per unit (rows here)",
            lambda: [samples.run_arm(RUN, v, by_row=True) for v in ("control", "candidate")],
            n,
        )
        timed("  read the pairs", lambda: samples.paired(RUN, "control", "candidate"), n)
        arm_a, arm_b = (samples.run_arm(RUN, v, by_row=True) for v in ("control", "candidate"))
        pairs = samples.paired(RUN, "control", "candidate")
        print(f"  ({pairs.pairs} pairs over {pairs.rows} rows)")
        ours = timed(
            "  the effects: paired delta method, 5 rows",
            lambda: compare_paired(pairs, arm_a, arm_b),
            n,
        )
        timed("  the effects as independent arms", lambda: compare_arms(arm_a, arm_b), n)

        def unit_bootstrap() -> None:
            # The p99 standard error by resampling units (200 draws): the method the
            # delta method replaces; each draw re-sorts every drawn unit's requests.
            rng = np.random.default_rng(0)
            values, unit, k = arm_a.latency, arm_a.latency_unit, arm_a.units
            order = np.argsort(unit, kind="stable")
            starts = np.searchsorted(unit[order], np.arange(k))
            sizes = np.bincount(unit, minlength=k)
            for _ in range(200):
                drawn = rng.integers(0, k, k)
                picks = np.concatenate(
                    [order[starts[u] : starts[u] + sizes[u]] for u in drawn[:2000]]
                )
                np.quantile(values[picks], 0.99)

        slow = timed(
            "  baseline: 200 unit-bootstrap draws of p99, one arm, 2,000 units", unit_bootstrap, 1
        )
        scale = arm_a.units / 2000
        print(
            f"  -> bootstrap (scaled to all {arm_a.units} units) / delta method: "
            f"{slow * scale / ours:.0f}x"
        )
        with store.transaction() as cur:
            cur.execute("UPDATE runs SET spec = ? WHERE run_id = ?", ['{"mode": "split"}', RUN])
        timed(
            "wb.analysis.compare: as a split run (no units: per request)",
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
