"""Sticky assignment: speed, split accuracy, stickiness across processes, plan overhead.

    PYTHONPATH=. .venv/bin/python bench/assign.py [--units 100000]

- `assign`: `promptlab.assign(config, unit)` on a 70/30 experiment (ramp 100), units
  per second, side by side with the baseline of hashing alone (`bucket_of`), as a ratio;
- `split`: the share of units each variant got, against the weights (percentage points);
- `processes`: the same units assigned by `promptlab assign FILE --units -` in a fresh
  process (what a live service does), compared line by line;
- `plan`: planning a split run of that many rows (`plan_items` with `StickySplit`)
  against planning it for one variant (`AllVariants(1)`), as a ratio: what sticky
  assignment adds to a run's planning.
Not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from promptlab.engine.plan.planner import AllVariants, StickySplit, plan_items
from promptlab.experiments import (
    ExperimentConfig,
    ExperimentVariant,
    allocate,
    assign,
    bucket_of,
    export_yaml,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def config() -> ExperimentConfig:
    weights = {"control": 70.0, "treatment": 30.0}
    variants = tuple(
        ExperimentVariant(
            name=name,
            prompt=f"demo@{i}",
            prompt_version_id=f"sha256:{i:064x}",
            weight=weight,
            control=name == "control",
        )
        for i, (name, weight) in enumerate(weights.items())
    )
    return ExperimentConfig(
        name="bench",
        description="",
        salt="bench",
        revision=1,
        mode="split",
        unit_column="unit",
        ramp=100.0,
        killed=False,
        variants=variants,
        allocation=allocate(weights),
        author="bench",
        created_at=datetime.now(UTC),
    )


def timed(fn: object, *args: object) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn(*args)  # type: ignore[operator]
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=100_000)
    args = parser.parse_args()
    cfg = config()
    units = [f"user-{i}" for i in range(args.units)]

    hash_s, _ = timed(lambda: [bucket_of(cfg.salt, u) for u in units])
    assign_s, decided = timed(lambda: [assign(cfg, u) for u in units])
    ratio = assign_s / hash_s
    print(
        f"assign     {args.units / assign_s:>12,.0f} units/s   "
        f"(hash only {args.units / hash_s:,.0f}/s; assign / hash time {ratio:.2f}x)"
    )

    shares = Counter(d.variant for d in decided)  # type: ignore[attr-defined]
    for name, weight in cfg.weights.items():
        got = 100 * shares[name] / args.units
        print(
            f"split      {name:<10} {got:6.2f}% of units, weight {weight:.0f}%: "
            f"{got - weight:+.2f} points"
        )

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.config.yaml"
        path.write_text(export_yaml(cfg), encoding="utf-8")
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "promptlab", "assign", str(path), "--units", "-"],
            input="\n".join(units),
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO_ROOT,
        )
        cli_s = time.perf_counter() - start
    other = [json.loads(line)["variant"] for line in out.stdout.splitlines()]
    same = sum(a == b.variant for a, b in zip(other, decided, strict=True))  # type: ignore[attr-defined]
    print(
        f"processes  {same:,} of {args.units:,} units got the same variant in a fresh "
        f"`promptlab assign` process ({cli_s:.1f} s for all, start-up included)"
    )

    rows = [{"unit": u, "text": "hello"} for u in units]

    def plan(strategy: object, names: list[str]) -> int:
        return sum(len(c.items) for c in plan_items("run_b", rows, names, strategy, 1))  # type: ignore[arg-type]

    names = ["control", "treatment"]
    split = StickySplit(
        "bench",
        1,
        lambda u: (lambda d: (d.variant, d.bucket, d.in_experiment))(assign(cfg, u)),
        "unit",
        names,
    )
    one_s, _ = timed(plan, AllVariants(1), ["control"])
    split_s, planned = timed(plan, split, names)
    print(
        f"plan       {args.units:,} rows split in {split_s:.2f} s ({planned:,} items), one "
        f"variant for all in {one_s:.2f} s: split / plain {split_s / one_s:.2f}x"
    )


if __name__ == "__main__":
    main()
