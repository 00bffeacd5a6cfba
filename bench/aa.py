"""The A/A harness as a bench: how often `compare` calls a difference that is not there,
and how often it finds one that is, on seeded traffic shaped like real logs.

    PYTHONPATH=. .venv/bin/python bench/aa.py [--pairs 400]

Traffic (promptlab/analysis/simulate_traffic.py): 600 users per arm, a heavy-tailed
number of requests per user, users differing in click propensity, completion and
latency. Prints, side by side in one run: the family-wise false-positive rate of the
whole table (any metric called better or worse after Holm) for the request-level
analysis this project used before, the per-unit analysis (logs and split-run shapes), 20
looks with the fixed-horizon test and with 19 always-valid looks tuned to the horizon
then the final fixed one (promptlab/analysis/sequential.py), 30 interim looks while the
data grows to 3x the planned units (within the interim 1%: the width frozen at the
horizon), CUPED on, at the minimum of
units per arm, all-mode runs at their minimum of rows; the power to find a +60% per-user
CTR lift at one fixed look, at the final look alone (4%), at one always-valid look at
the horizon alone, and over the 20 looks; how often the Bayesian view's "chance to beat
control > 95%" fires with no difference (one row, the table, 20 looks); units seen in
both arms left out (contamination); and CUPED's variance reduction on data with a
pre/post correlation near 0.6. Not a test: tests/test_aa.py asserts a smaller
configuration.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from promptlab.analysis.sequential import FINAL, interim  # noqa: E402
from promptlab.analysis.simulate import (  # noqa: E402
    bayes_call_rate,
    cuped_effects,
    false_positive_rate,
    paired_false_positive_rate,
    past_horizon_false_positive_rate,
    power,
)
from promptlab.analysis.simulate_shared import contamination_effects  # noqa: E402
from promptlab.analysis.simulate_traffic import Traffic  # noqa: E402
from promptlab.analysis.stats import MIN_ROWS_PAIRED, MIN_UNITS_PER_ARM  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400, help="A/A pairs per figure")
    args = parser.parse_args()
    pairs = args.pairs
    traffic = Traffic()
    figures = [
        (
            "A/A, per request (before)",
            lambda: false_positive_rate(pairs // 4, traffic, per_request=True),
        ),
        ("A/A, per unit, logs", lambda: false_positive_rate(pairs, traffic)),
        (
            "A/A, per unit, split run",
            lambda: false_positive_rate(pairs, replace(traffic, shape="split")),
        ),
        (
            "A/A, 20 looks, fixed horizon",
            lambda: false_positive_rate(pairs // 4, traffic, looks=20),
        ),
        (
            "A/A, 20 looks, always valid",
            lambda: false_positive_rate(pairs, traffic, looks=20, sequential=True),
        ),
        (
            "A/A, 30 interim looks to 3x horizon",
            lambda: past_horizon_false_positive_rate(pairs, traffic, looks=30),
        ),
        (
            "A/A, CUPED",
            lambda: false_positive_rate(pairs, replace(traffic, pre_share=1.0), cuped=True),
        ),
        (
            "A/A, 100 users (the minimum), logs",
            lambda: false_positive_rate(pairs, replace(traffic, units=MIN_UNITS_PER_ARM), seed=99),
        ),
        ("A/A, all-mode, 20 rows x 1", lambda: paired_false_positive_rate(pairs, MIN_ROWS_PAIRED)),
        (
            "A/A, all-mode, 20 rows x 3",
            lambda: paired_false_positive_rate(pairs, MIN_ROWS_PAIRED, repeats=3),
        ),
        (
            "A/A, Bayesian, CTR chance > 95%",
            lambda: bayes_call_rate(pairs, traffic, metric="CTR", one_sided=True),
        ),
        ("A/A, Bayesian, any row > 95% or < 5%", lambda: bayes_call_rate(pairs, traffic)),
        (
            "A/A, Bayesian, any row, 20 looks",
            lambda: bayes_call_rate(pairs // 4, traffic, looks=20),
        ),
        ("power, +60% CTR, fixed horizon", lambda: power(pairs, traffic, 0.6)),
        ("power, +60% CTR, final look (4%)", lambda: power(pairs, traffic, 0.6, only=FINAL)),
        (
            "power, +60% CTR, always valid alone",
            lambda: power(pairs, traffic, 0.6, only=interim(traffic.units)),
        ),
        (
            "power, +60% CTR, 20 looks to horizon",
            lambda: power(pairs, traffic, 0.6, sequential=True, looks=20),
        ),
    ]
    print(f"{traffic.units} users per arm; {pairs} pairs per figure (a quarter where marked)")
    for label, measure in figures:
        started = time.perf_counter()
        rate = measure()
        print(f"  {label:38} {rate:6.1%}   ({time.perf_counter() - started:5.1f} s)")
    started = time.perf_counter()
    shared = contamination_effects(pairs // 2, traffic, lift=0.6, share=0.3)
    print(
        f"  contamination, +60% CTR, 30% of users in both arms: CTR effect "
        f"{shared.effect_kept:+.4f}"
        f" kept, {shared.effect_left_out:+.4f} left out, {shared.effect_clean:+.4f} with none "
        f"shared; power {shared.power_kept:.1%} kept, {shared.power_left_out:.1%} left out "
        f"({time.perf_counter() - started:.1f} s)"
    )
    correlation, ratio = cuped_effects(pairs // 2, replace(traffic, pre_share=1.0))
    print(
        f"  CUPED: pre/post correlation {correlation:.2f}, variance of the CTR effect "
        f"{ratio:.2f}x without it (a reduction of {1 - ratio:.0%})"
    )


if __name__ == "__main__":
    main()
