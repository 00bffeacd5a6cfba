"""The demo's first look has an answer: its experiment runs on 400 customers, so Compare
on first start shows a verdict the simulated model made (issue 40, item 6)."""

from __future__ import annotations

from pathlib import Path

from promptlab.analysis.stats import MIN_UNITS_PER_ARM, Verdict
from promptlab.config import DEMO_DIR, Settings
from promptlab.data.demo_customers import CUSTOMERS, customers_csv
from promptlab.workbench import Workbench


def test_the_shipped_customers_file_is_what_the_generator_makes() -> None:
    assert (DEMO_DIR / "customers.csv").read_text(encoding="utf-8") == customers_csv()


def test_the_first_look_at_the_demo_run_has_a_verdict(demo_db: Path) -> None:
    settings = Settings.from_env({"PROMPTLAB_DB": str(demo_db), "PROMPTLAB_AUTHOR": "tester"})
    with Workbench.open(settings) as wb:
        (run,) = wb.analysis.runs_with_results()
        comparison = wb.analysis.compare(run.run_id)
    units = {name: u for name, (u, _) in comparison.arms.items()}
    assert sum(units.values()) == CUSTOMERS
    assert min(units.values()) >= MIN_UNITS_PER_ARM
    decided = [r for r in comparison.rows if r.verdict in (Verdict.BETTER, Verdict.WORSE)]
    # Staging's longer prompt and answers make the simulated model slower: a verdict on
    # latency, from the run's own results (nothing about it is set by the demo).
    assert ("latency p50", Verdict.WORSE) in [(r.metric, r.verdict) for r in decided]
    assert comparison.srm is not None and not comparison.srm.mismatch
