"""Issue 12's scale check: a million results and a million feedback events, then the
metrics table and the Compare page.

    PYTHONPATH=. .venv/bin/python bench/scale.py

Fills a temporary DuckDB file with one split run of `--rows` dataset rows (a million
results at the default) through two variants of an experiment shaped like the demo one
(70 / 30, sticky per unit, so the SRM check runs), and about a million feedback events
on them (impressions on five results in six, clicks on about a fifth of those; one
INSERT ... SELECT); the fills are bench/_fill.py's. Then times:

1. `wb.analysis.metrics(run_id=...)` and `metrics(prompt=..., since="7d")` (with CTR from
   the feedback), best and median of `--repeats`, against a baseline fetching the same
   rows (results and feedback) into pandas and grouping there: the ratio is what to
   compare across machines;
2. the Compare page as Streamlit renders it (AppTest on pages/compare.py, PROMPTLAB_DB
   pointing at the file): the first render (opening the database included) and a
   second one, then the page's Workbench calls and figures timed one by one and summed
   (bench/compare_page.py).

Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._fill import (  # noqa: E402
    RUN,
    add_feedback,
    bench_env,
    bench_workbench,
    build_timed,
    pandas_baseline,
    timed,
)
from bench.compare_page import page_calls  # noqa: E402

PAGE = ROOT / "pages" / "compare.py"
#: Impressions on five results in six (and clicks on a fifth of those): about as many
#: feedback events as results.
IMPRESSIONS_PER_6 = 5


def render_page(n: int) -> None:
    """AppTest renders of the Compare page: a first (a fresh process-wide workbench) and
    `n` more in the same session."""
    from streamlit.testing.v1 import AppTest

    from promptlab.ui import resources

    at = AppTest.from_file(str(PAGE), default_timeout=600)
    at.query_params["run"] = RUN
    t0 = time.perf_counter()
    at.run()
    first = time.perf_counter() - t0
    if at.exception:
        raise SystemExit(f"the page failed: {at.exception}")
    shown = len(list(at.get("plotly_chart")))
    srm = [s.value for s in [*at.success, *at.error, *at.info] if "SRM" in str(s.value)]
    print(f"  {'first render (opens the database)':<58} {first * 1000:9.1f} ms")
    verdict = srm[0].replace("\\", "")[:70] if srm else "no SRM check"
    print(f"    ({shown} charts, {len(at.dataframe)} tables; {verdict})")
    again = []
    for _ in range(n):
        t0 = time.perf_counter()
        at.run()
        again.append(time.perf_counter() - t0)
    print(
        f"  {'next renders, same session':<58} best of {n}: {min(again) * 1000:9.1f} ms, "
        f"median {sorted(again)[n // 2] * 1000:9.1f} ms"
    )
    resources.close_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="dataset rows (= results)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--db", type=Path, help="keep the database here (filled once, reused when it exists)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measure(args.db or Path(tmp) / "bench.duckdb", args.rows, args.repeats)


def measure(path: Path, rows: int, n: int) -> None:
    """Fill `path` unless it has results, then time and print everything."""
    with bench_workbench(path) as (store, wb):
        if wb.analysis.has_results():
            print(f"reusing {path}")
        else:
            build_timed(wb, rows, split=True)
            t0 = time.perf_counter()
            events = add_feedback(store, IMPRESSIONS_PER_6)
            print(f"added {events} feedback events in {time.perf_counter() - t0:.1f} s")
        print("metrics table")
        ours = timed(
            "wb.analysis.metrics(run_id) (DuckDB)", lambda: wb.analysis.metrics(run_id=RUN), n
        )
        base = timed(
            "baseline: fetch results + feedback to pandas, group",
            lambda: pandas_baseline(store, with_feedback=True),
            n,
        )
        print(f"  -> baseline / DuckDB: {base / ours:.1f}x")
        timed(
            "wb.analysis.metrics(prompt='bench', since='7d')",
            lambda: wb.analysis.metrics(prompt="bench", since="7d"),
            n,
        )
    print("Compare page (Streamlit AppTest)")
    os.environ.update(bench_env(path))
    os.environ.pop("PROMPTLAB_PROVIDERS", None)
    render_page(n)
    print("Compare page: its Workbench calls and figures, one by one")
    with bench_workbench(path) as (_, wb):
        page_calls(wb, RUN, n)


if __name__ == "__main__":
    main()
