"""What the anomaly detectors cost per item, live in the engine and after a run.

    PYTHONPATH=. .venv/bin/python bench/anomalies.py            # 200,000 items

A stream like a sloppy model's (5% timeouts, 5% invalid outputs, three fields, output
lengths 80-120 chars) over two variants, with a burst of failures and a length collapse
in it, so alerts are raised along the way. Timed: `RunDetector.observe` alone (what the
engine adds per final row, the output already parsed by the check), and
`observation_of` + `observe` from stored rows (what the after-run pass adds per row, the
JSON parsed again). Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from promptlab.checks.anomalies import Observation, RunDetector, observation_of

FIELDS = frozenset({"category", "priority", "summary"})


def rows(n: int) -> list[tuple[int, str, str, str | None, str | None, str | None]]:
    rng = random.Random(1)
    out: list[tuple[int, str, str, str | None, str | None, str | None]] = []
    for seq in range(n):
        variant = "a" if seq % 2 else "b"
        draw = rng.random()
        if draw < 0.05 or n // 2 <= seq < n // 2 + 200:
            out.append((seq, variant, "failed", "timeout", None, None))
            continue
        size = rng.randint(10, 20) if seq > 3 * n // 4 else rng.randint(60, 100)
        text = json.dumps({"category": "bug", "priority": "high", "summary": "x" * size})
        out.append((seq, variant, "succeeded", None, "invalid" if draw < 0.1 else "valid", text))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=200_000)
    n = parser.parse_args().items
    stored = rows(n)
    live = [
        Observation(s, v, st, k, c, FIELDS if t else None, len(t) if t else None)
        for s, v, st, k, c, t in stored
    ]
    detector = RunDetector("bench", {"a": FIELDS, "b": FIELDS})
    t0 = time.perf_counter()
    alerts = sum(len(detector.observe(obs)) for obs in live)
    live_s = time.perf_counter() - t0
    detector = RunDetector("bench", {"a": FIELDS, "b": FIELDS})
    t0 = time.perf_counter()
    for row in stored:
        detector.observe(observation_of(*row))
    after_s = time.perf_counter() - t0
    print(f"{n:,} items, {alerts} alerts")
    print(f"live (observe):              {live_s * 1e6 / n:.2f} us/item ({n / live_s:,.0f}/s)")
    print(f"after-run (parse + observe): {after_s * 1e6 / n:.2f} us/item ({n / after_s:,.0f}/s)")


if __name__ == "__main__":
    main()
