"""What the Compare page reads and draws over a million results, timed part by part.

    PYTHONPATH=. .venv/bin/python bench/compare_page.py --rows 500000

Builds the same all-mode A/B as bench/metrics.py (`--rows` dataset rows through two
variants), then times each call pages/compare.py makes for it, and the sum: the
page's work in Python (Streamlit's own rendering and the browser's drawing are not
counted). Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.metrics import RUN, build, timed  # noqa: E402
from promptlab.config import Settings  # noqa: E402
from promptlab.store import Store  # noqa: E402
from promptlab.workbench import (  # noqa: E402
    Workbench,
    forest_chart,
    latency_ecdf_chart,
    latency_percentiles_chart,
    over_time_chart,
    rate_chart,
    summary_rows,
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
            names = ["control", "candidate"]
            parts = [
                ("has_results()", wb.has_results),
                ("runs_with_results()", wb.runs_with_results),
                ("metrics(run_id)", lambda: wb.metrics(run_id=RUN)),
                ("compare(run_id) + summary_rows", lambda: summary_rows(wb.compare(RUN))),
                ("latencies of both variants", lambda: [wb.latencies(RUN, v) for v in names]),
                ("metrics_over_time(run_id)", lambda: wb.metrics_over_time(RUN)),
                ("side_by_side(run_id) (first page)", lambda: wb.side_by_side(RUN)),
                (
                    "side_by_side(run_id, only_different=True)",
                    lambda: wb.side_by_side(RUN, only_different=True),
                ),
            ]
            spent = sum(timed(label, call, n) for label, call in parts)
            metrics = wb.metrics(run_id=RUN)
            comparison = wb.compare(RUN)
            samples = {v: wb.latencies(RUN, v) for v in names}
            series = wb.metrics_over_time(RUN)

            def figures() -> None:
                forest_chart(comparison.rows)
                rate_chart(metrics)
                latency_percentiles_chart(metrics)
                latency_ecdf_chart(samples)
                over_time_chart(series)

            spent += timed("the five figures", figures, n)
            print(f"  {'page total (best runs summed)':<58} {spent * 1000:9.1f} ms")


if __name__ == "__main__":
    main()
