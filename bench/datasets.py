"""Importing a million-row CSV as a dataset, against reading it with Python's csv module.

    PYTHONPATH=. .venv/bin/python bench/datasets.py [--rows 1000000]

Writes a CSV of support tickets (id, customer_id, ticket text, tier) in a temporary
folder, then runs each step in a fresh process, so one step's peak memory does not hide
another's:
- `import`: `DatasetStore.import_file` into a new DuckDB file (DuckDB's `read_csv`,
  one `INSERT ... SELECT`, one transaction),
- `stream`: `iter_rows` over the imported dataset, every row decoded to a dict,
- `csv module`: the baseline, `csv.DictReader` reading the file into a list of dicts
  (what loading a dataset into Python costs).
For each: seconds, rows/s, and the growth of the process's peak RSS
(`resource.getrusage().ru_maxrss`) over what it had after its imports, also as a
multiple of the file size; then import / baseline ratios. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WORDS = [
    *("invoice", "refund", "login", "password", "export", "dashboard", "crash", "upload"),
    *("team", "project", "error", "billing", "account", "email", "sync", "calendar"),
    *("webhook", "report", "seats", "plan", "renewal", "slow", "search"),
]


def write_csv(path: Path, rows: int) -> None:
    rng = random.Random(7)
    tiers = ("free", "pro", "enterprise")
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write("ticket_id,customer_id,ticket,customer_tier\n")
        for i in range(1, rows + 1):
            text = " ".join(rng.choices(WORDS, k=rng.randint(6, 18)))
            handle.write(f'T-{i},C-{rng.randint(1, rows // 4)},"{text}, please help.",')
            handle.write(f"{tiers[i % 3]}\n")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def step(name: str, csv_path: Path, db_path: Path) -> dict[str, float]:
    """One step in this process; returns rows, seconds and peak RSS growth."""
    if name == "csv":
        import csv

        before = peak_rss_bytes()
        start = time.perf_counter()
        with csv_path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        count = len(rows)
    else:
        from promptlab.data.datasets import DatasetStore
        from promptlab.store import Store

        with Store(db_path) as store:
            datasets = DatasetStore(store)
            before = peak_rss_bytes()
            start = time.perf_counter()
            if name == "import":
                count = datasets.import_file(csv_path, "tickets", author="bench").row_count
            else:
                count = sum(1 for _row in datasets.iter_rows("tickets"))
    seconds = time.perf_counter() - start
    return {"rows": count, "seconds": seconds, "rss_growth": peak_rss_bytes() - before}


def run_step(name: str, csv_path: Path, db_path: Path) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, __file__, "--step", name, str(csv_path), str(db_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"step {name} failed:\n{result.stderr}")
    return dict(json.loads(result.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--step", nargs=3, metavar=("NAME", "CSV", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        name, csv_path, db_path = args.step
        print(json.dumps(step(name, Path(csv_path), Path(db_path))))
        return
    with tempfile.TemporaryDirectory(prefix="promptlab-bench-") as folder:
        csv_path = Path(folder) / "tickets.csv"
        db_path = Path(folder) / "bench.duckdb"
        write_csv(csv_path, args.rows)
        size = csv_path.stat().st_size
        print(f"{args.rows:,} rows, {size / 2**20:.1f} MiB CSV")
        results = {
            "import (DuckDB read_csv)": run_step("import", csv_path, db_path),
            "stream (iter_rows)": run_step("stream", csv_path, db_path),
            "csv module -> list of dicts": run_step("csv", csv_path, db_path),
        }
        heads = ("rows", "seconds", "rows/s", "peak RSS +MiB", "x file")
        widths = (10, 8, 11, 14, 7)
        print(f"{'step':30} " + " ".join(f"{h:>{w}}" for h, w in zip(heads, widths, strict=True)))
        for label, r in results.items():
            print(
                f"{label:30} {int(r['rows']):>10,} {r['seconds']:>8.2f} "
                f"{r['rows'] / r['seconds']:>11,.0f} {r['rss_growth'] / 2**20:>14.1f} "
                f"{r['rss_growth'] / size:>7.2f}"
            )
        imported, baseline = (
            results["import (DuckDB read_csv)"],
            results["csv module -> list of dicts"],
        )
        print(
            f"import / csv module: {imported['seconds'] / baseline['seconds']:.2f}x the time, "
            f"{imported['rss_growth'] / max(baseline['rss_growth'], 1):.2f}x the peak RSS growth"
        )


if __name__ == "__main__":
    main()
