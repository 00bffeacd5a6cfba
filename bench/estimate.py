"""The launch estimate's time against the run's: the demo's capped run, and the same
spec with its limits dropped and with a tighter providers file.

    PYTHONPATH=. .venv/bin/python bench/estimate.py

Each case estimates a spec on a fresh demo database, runs it on the built-in simulated
model (its real latencies), and prints the estimate, the run's time from its start to
its last result, and their ratio. Not a test: it asserts nothing.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from promptlab.config import DEMO_DIR
from promptlab.records import RunStatus
from promptlab.workbench import Workbench

SPEC = DEMO_DIR / "runs" / "triage-ab.yaml"


def measure(name: str, providers: str | None, keep_limits: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PROMPTLAB_DB"] = str(Path(tmp) / "bench.duckdb")
        if providers is None:
            os.environ.pop("PROMPTLAB_PROVIDERS", None)
        else:
            path = Path(tmp) / "providers.yaml"
            path.write_text(providers)
            os.environ["PROMPTLAB_PROVIDERS"] = str(path)
        with Workbench.open() as wb:
            wb.demo.load()
            spec = wb.runs.load_spec(SPEC)
            if not keep_limits:
                spec = replace(spec, limits={})
            estimate = wb.runs.estimate(spec)
            started = time.monotonic()
            run_id = wb.runs.start(spec)
            done = wb.runs.wait(run_id, 600)
            took = time.monotonic() - started
            assert done.status == RunStatus.COMPLETED, done
    print(
        f"{name:<34} estimate {estimate.seconds:6.1f} s  actual {took:6.1f} s  "
        f"ratio {estimate.seconds / took:4.2f}  bound: {estimate.bound}"
    )


def main() -> None:
    measure("triage-ab.yaml (rpm 600, conc. 8)", None, keep_limits=True)
    measure("without its limits", None, keep_limits=False)
    measure("providers file rpm 120", "endpoints:\n  sim: {rpm: 120}\n", keep_limits=True)


if __name__ == "__main__":
    main()
