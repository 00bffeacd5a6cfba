"""How soon a cancel stops a run that is still being planned.

    PYTHONPATH=. .venv/bin/python bench/cancel_planning.py [--rows 500000] [--variants 4]

A run of `rows` x `variants` items (2 million by default) on the simulated model, in a
database of its own. Side by side in one run:

- `plan`: submitted and left alone: the seconds until the plan is stored (the run is
  scheduled), then it is cancelled;
- `cancel`: submitted again, cancelled once its first chunk is stored: the seconds from
  the cancel to the run's end, and the items it had planned by then.

Prints both and their ratio. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from promptlab.config import Settings
from promptlab.workbench import Workbench


def spec(dataset: Path, variants: int) -> dict[str, object]:
    return {
        "name": "big-plan",
        "dataset": str(dataset),
        "variants": [
            {
                "name": f"v{i}",
                "model": "sim:fast",
                "params": {"max_tokens": 8},
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
            }
            for i in range(variants)
        ],
    }


def stored(wb: Workbench, run_id: str) -> int:
    """The items planned so far (a cheap read: the view's would lag the planner)."""
    with wb.store.read() as cur:
        row = cur.execute("SELECT total_items FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return int(row[0] or 0) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--variants", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="promptlab-plan-bench-") as tmp:
        dataset = Path(tmp) / "rows.csv"
        dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(args.rows)))
        settings = Settings.from_env().with_db(Path(tmp) / "plan.duckdb")
        total = args.rows * args.variants
        with Workbench.open(settings) as wb:
            t0 = time.perf_counter()
            run_id = wb.runs.start(wb.runs.spec_from_data(spec(dataset, args.variants)))
            while wb.runs.view(run_id).status in ("submitted",):
                time.sleep(0.05)
            planned_s = time.perf_counter() - t0
            wb.runs.cancel(run_id)
            wb.runs.wait(run_id, 600)
            run_id = wb.runs.start(wb.runs.spec_from_data(spec(dataset, args.variants)))
            while stored(wb, run_id) == 0:
                time.sleep(0.01)
            at_cancel = stored(wb, run_id)
            t1 = time.perf_counter()
            wb.runs.cancel(run_id)
            ended = wb.runs.wait(run_id, 600)
            cancel_s = time.perf_counter() - t1
            planned = stored(wb, run_id)
    print(f"{total:,} items ({args.rows:,} rows x {args.variants} variants)")
    print(f"plan     {planned_s:7.2f} s to plan them all")
    print(
        f"cancel   {cancel_s:7.2f} s from the cancel to the run's end ({ended.status}; "
        f"{at_cancel:,} items planned at the cancel, {planned:,} at the end)"
    )
    print(f"ratio    {cancel_s / planned_s:7.3f}")


if __name__ == "__main__":
    main()
