"""What the Compare page reads and draws over a million results, timed part by part.

    PYTHONPATH=. .venv/bin/python bench/compare_page.py --rows 500000

Builds the same all-mode A/B as bench/metrics.py (bench/_fill.py: `--rows` dataset
rows through two variants), then times each call pages/compare.py makes for it, and
the sum: the page's work in Python (Streamlit's own rendering and the browser's drawing are not
counted). Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._fill import NAMES, RUN, bench_workbench, build_timed, timed  # noqa: E402
from promptlab.views.charts import (  # noqa: E402
    latency_ecdf_chart,
    latency_percentiles_chart,
    over_time_chart,
    rate_chart,
)
from promptlab.views.compare import summary_rows  # noqa: E402
from promptlab.views.forest import forest_chart  # noqa: E402
from promptlab.workbench import Workbench  # noqa: E402


def page_calls(wb: Workbench, run_id: str, n: int) -> float:
    """Time each facade call pages/compare.py makes on its first look at a run of two
    variants, and its five figures; print the sum of the best times and return it (s).

    The per-variant metrics come with the comparison, and a split run gets no
    side-by-side query (each input went to one variant), as on the page.
    """
    paired = wb.analysis.compare(run_id).paired
    parts: list[tuple[str, Callable[[], Any]]] = [
        ("has_results() (app.py)", wb.analysis.has_results),
        ("runs_with_results()", wb.analysis.runs_with_results),
        ("control_variant(run_id)", lambda: wb.analysis.control_variant(run_id, NAMES)),
        (
            "compare(run_id) (metrics included) + summary_rows",
            lambda: summary_rows(wb.analysis.compare(run_id)),
        ),
        ("latencies of both variants", lambda: [wb.analysis.latencies(run_id, v) for v in NAMES]),
        ("metrics_over_time(run_id)", lambda: wb.analysis.metrics_over_time(run_id)),
    ]
    if paired:
        parts.append(
            ("side_by_side(run_id) (first page)", lambda: wb.analysis.side_by_side(run_id))
        )
    spent = sum((timed(label, call, n) for label, call in parts), 0.0)
    comparison = wb.analysis.compare(run_id)
    samples = {v: wb.analysis.latencies(run_id, v) for v in NAMES}
    series = wb.analysis.metrics_over_time(run_id)

    def figures() -> None:
        forest_chart(comparison.rows)
        rate_chart(comparison.metrics)
        latency_percentiles_chart(comparison.metrics)
        latency_ecdf_chart(samples)
        over_time_chart(series)

    spent += timed("the five figures", figures, n)
    print(f"  {'page total (best runs summed)':<58} {spent * 1000:9.1f} ms")
    if paired:
        timed(
            "(toggle on) side_by_side(run_id, only_different=True)",
            lambda: wb.analysis.side_by_side(run_id, only_different=True),
            n,
        )
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=500_000, help="dataset rows (x2 results)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.repeats
    with (
        tempfile.TemporaryDirectory() as tmp,
        bench_workbench(Path(tmp) / "bench.duckdb") as (_, wb),
    ):
        build_timed(wb, args.rows)
        page_calls(wb, RUN, n)


if __name__ == "__main__":
    main()
