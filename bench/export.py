"""How long exporting a million results takes: DuckDB's COPY against fetching into Python.

    PYTHONPATH=. .venv/bin/python bench/export.py --rows 500000

Builds the run of bench/metrics.py (`--rows` dataset rows through two variants: a
million results at the default) in a temporary DuckDB file, then times writing the
run's `results` table:

- `wb.exports.write_table("results", FMT, ...)` for parquet, csv and jsonl (COPY to a
  temporary name, then a rename), with no secret in the environment and with one (every
  text and JSON column then goes through `replace()`);
- baselines in Python: the rows fetched as an Arrow table and written by
  `pyarrow.parquet.write_table`, and the rows fetched as tuples and written by the `csv`
  module.

Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._fill import RUN, bench_workbench, build_timed, timed  # noqa: E402
from promptlab.store import Store  # noqa: E402


def arrow_baseline(store: Store, run_id: str, out: Path) -> None:
    import pyarrow.parquet as pq

    with store.read() as cur:
        table = cur.sql("SELECT * FROM results WHERE run_id = ?", params=[run_id]).to_arrow_table()
    pq.write_table(table, out)


def csv_baseline(store: Store, run_id: str, out: Path) -> None:
    with store.read() as cur:
        result = cur.execute("SELECT * FROM results WHERE run_id = ?", [run_id])
        names = [d[0] for d in result.description]
        with out.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(names)
            while rows := result.fetchmany(100_000):
                writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=500_000, help="dataset rows (x2 results)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.repeats
    run_id = RUN
    for name in [k for k in os.environ if metrics_secret(k)]:
        del os.environ[name]  # the first timings mask nothing
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "bench.duckdb"
        with bench_workbench(path) as (store, wb):
            build_timed(wb, args.rows)

            def export(fmt: str) -> Callable[[], Any]:
                out = folder / f"results.{fmt}"
                return lambda: wb.exports.write_table(
                    "results", fmt, out, run_id=run_id, force=True
                )

            print("export of the run's results")
            ours = {
                fmt: timed(f"write_table(results, {fmt}) (COPY)", export(fmt), n)
                for fmt in ("parquet", "csv", "jsonl")
            }
            arrow = timed(
                "baseline: fetch Arrow table, pyarrow.parquet.write_table",
                lambda: arrow_baseline(store, run_id, folder / "base.parquet"),
                n,
            )
            rows = timed(
                "baseline: fetch tuples, csv module",
                lambda: csv_baseline(store, run_id, folder / "base.csv"),
                n,
            )
            print(f"  -> parquet: baseline / COPY {arrow / ours['parquet']:.1f}x")
            print(f"  -> csv:     baseline / COPY {rows / ours['csv']:.1f}x")
            os.environ["BENCH_PROVIDER_KEY"] = "sk-bench-0123456789abcdef"
            masked = timed("write_table(results, parquet), one secret masked", export("parquet"), n)
            print(f"  -> masking one secret: {masked / ours['parquet']:.2f}x the time")
            sizes = {p.name: p.stat().st_size for p in sorted(folder.glob("*.*")) if p != path}
            print("  sizes: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items()))


def metrics_secret(name: str) -> bool:
    from promptlab.audit.redact import SECRET_ENV_NAME

    return bool(SECRET_ENV_NAME.search(name))


if __name__ == "__main__":
    main()
