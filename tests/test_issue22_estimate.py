"""Issue 22, item 4: the launch estimate shows the split the run will really give, in units
and requests, warns when the units are too few or the split lumpy, and its tokens and
cost are within 25% of what the demo runs then use (the simulated model, no latency)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.analysis.stats import MIN_UNITS_PER_ARM
from promptlab.config import DEMO_DIR
from promptlab.engine.plan.estimate import RunEstimate
from promptlab.engine.spec.runspec import RunSpec
from promptlab.records import RunStatus
from promptlab.store import Store
from promptlab.workbench import Workbench
from tests.apptest_helpers import shown

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")
#: What the estimate may be off by, either way, on the demo.
TOLERANCE = 0.25
#: data/demo/tickets.csv: 40 tickets from 17 customers.
DEMO_ROWS, DEMO_UNITS = 40, 17


@pytest.fixture
def sim_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in sim endpoint (its prices kept) answering at once, unthrottled."""
    providers = tmp_path / "providers.yaml"
    providers.write_text("endpoints:\n  sim: {latency_scale: 0, rpm: 1000000}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))


@pytest.fixture
def wb(sim_at_once: None) -> Iterator[Workbench]:
    """A new database with the demo content and no results: no history to learn from."""
    with Workbench.open() as bench:
        bench.demo.load()
        yield bench


def run_and_compare(wb: Workbench, spec: RunSpec) -> tuple[RunEstimate, dict[str, float], str]:
    """The estimate, then the run: estimate / actual for tokens in, out, all, and cost."""
    estimate = wb.runs.estimate(spec)
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
    view = wb.runs.view(run_id)
    used = view.summary
    assert used.succeeded == view.total == estimate.requests
    assert estimate.cost_usd is not None
    ratios = {
        "input tokens": estimate.input_tokens / used.input_tokens,
        "output tokens": estimate.output_tokens / used.output_tokens,
        "tokens": (estimate.input_tokens + estimate.output_tokens)
        / (used.input_tokens + used.output_tokens),
        "cost": estimate.cost_usd / used.cost_usd,
    }
    # The requests per variant are the run's own, not the weights' expectation.
    actual = {v.name: v.succeeded + v.failed for v in view.variants}
    assert {v.name: v.requests for v in estimate.variants} == actual
    return estimate, ratios, run_id


def assert_within(ratios: dict[str, float]) -> None:
    off = {k: round(r, 3) for k, r in ratios.items() if not 1 - TOLERANCE <= r <= 1 + TOLERANCE}
    assert not off, f"estimate / actual out of 1 +- {TOLERANCE}: {off} (all: {ratios})"


def assigned_units(db: Path, run_id: str) -> dict[str, int]:
    with Store(db) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT variant, count(DISTINCT unit_id) FROM assignments WHERE run_id = ? "
            "GROUP BY variant",
            [run_id],
        ).fetchall()
    return {str(variant): int(units) for variant, units in rows}


def test_the_demo_split_run_estimate_is_within_25_percent_and_counts_its_units(
    wb: Workbench, db_path: Path
) -> None:
    spec = wb.runs.experiment_spec("triage-split", "tickets", repeats=10)
    estimate, ratios, run_id = run_and_compare(wb, spec)
    assert_within(ratios)
    assert all(v.basis.startswith("simulator on ") for v in estimate.variants)
    # The units: all 17 customers, each variant's the ones the run assigned it.
    units = estimate.units
    assert units is not None
    assert (units.column, units.units, units.outside, units.complete) == (
        "customer_id",
        DEMO_UNITS,
        0,
        True,
    )
    by_variant = {v.name: v.units for v in estimate.variants}
    wb.close()
    assert by_variant == assigned_units(db_path, run_id)
    assert {v.name: v.expected_share for v in estimate.variants} == {
        "control": pytest.approx(0.7),
        "staging": pytest.approx(0.3),
    }
    # 17 customers cannot give 70/30 with 100 in each variant: the estimate says so.
    few = [w for w in estimate.warnings if w.startswith("Too few units for a 70/30 split")]
    assert len(few) == 1, estimate.warnings
    assert f"staging gets {by_variant['staging']} of the 17 distinct customer_id" in few[0]
    assert f"at least {MIN_UNITS_PER_ARM} units" in few[0] and "about 334 units" in few[0]


def test_the_demo_all_mode_run_estimate_is_within_25_percent(wb: Workbench) -> None:
    spec = wb.runs.experiment_spec("triage-split", "tickets", mode="all", repeats=2)
    estimate, ratios, _ = run_and_compare(wb, spec)
    assert_within(ratios)
    assert estimate.requests == 2 * 2 * DEMO_ROWS
    # Every row goes to every variant: no units to split, nothing to warn about.
    assert estimate.units is None and estimate.warnings == ()
    assert all(v.units is None for v in estimate.variants)


def test_the_demo_run_spec_file_estimate_is_within_25_percent(wb: Workbench) -> None:
    spec = wb.runs.load_spec(DEMO_DIR / "runs" / "triage-ab.yaml")
    # Its own cap (600 requests a minute) would only make the test slow.
    _, ratios, _ = run_and_compare(wb, replace(spec, limits={}))
    assert_within(ratios)


def test_the_estimate_honours_the_spec_limits_and_the_providers_file(
    wb: Workbench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """triage-ab.yaml caps its run at 600 requests a minute and 8 at once: 80 requests
    are 10 in the first second's burst, then 70 spaced 0.1 s apart, not the endpoint's
    unlimited rate. A tighter providers file binds instead, and the text says whose."""
    spec = wb.runs.load_spec(DEMO_DIR / "runs" / "triage-ab.yaml")
    estimate = wb.runs.estimate(spec)
    assert estimate.requests == 80
    assert estimate.seconds == pytest.approx(7.0)
    assert estimate.bound == "sim: 600 requests/min (the spec's limits)"
    unlimited = wb.runs.estimate(replace(spec, limits={}))
    assert unlimited.seconds < 1 and "spec" not in unlimited.bound
    providers = tmp_path / "slow.yaml"
    providers.write_text("endpoints:\n  sim: {latency_scale: 0, rpm: 120}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    with Workbench.open() as slower:
        capped = slower.runs.estimate(spec)
    assert capped.seconds == pytest.approx((80 - 2) / 2)
    assert capped.bound == "sim: 120 requests/min"


def write_units(path: Path, rows_per_unit: list[int]) -> Path:
    lines = ["customer_id,ticket,customer_tier"]
    for unit, rows in enumerate(rows_per_unit):
        lines += [f"U-{unit},The export button does nothing (ticket {i}).,pro" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_unit_with_many_rows_makes_the_split_lumpy_and_the_estimate_says_so(
    wb: Workbench, tmp_path: Path
) -> None:
    # 500 customers with a ticket each, and one with 1,000: wherever that one lands, the
    # requests are far from 70/30 although the units are not.
    wb.datasets.import_file(write_units(tmp_path / "heavy.csv", [1000] + [1] * 500), "heavy")
    estimate = wb.runs.estimate(wb.runs.experiment_spec("triage-split", "heavy"))
    assert estimate.units is not None and estimate.units.units == 501
    assert all((v.units or 0) >= MIN_UNITS_PER_ARM for v in estimate.variants)
    lumpy = [w for w in estimate.warnings if w.startswith("The split will be ")]
    assert len(lumpy) == 1 and not any(w.startswith("Too few") for w in estimate.warnings)
    assert "of requests" in lumpy[0] and "not 70/30" in lumpy[0]


def test_enough_units_give_no_warning(wb: Workbench, tmp_path: Path) -> None:
    wb.datasets.import_file(write_units(tmp_path / "many.csv", [2] * 400), "many")
    estimate = wb.runs.estimate(wb.runs.experiment_spec("triage-split", "many"))
    assert estimate.units is not None and estimate.units.units == 400
    assert estimate.warnings == ()
    assert estimate.requests == 800


def test_a_killed_experiment_compares_nothing_and_warns_of_nothing(wb: Workbench) -> None:
    wb.experiments.update("triage-split", killed=True)
    estimate = wb.runs.estimate(wb.runs.experiment_spec("triage-split", "tickets"))
    assert {v.name: v.requests for v in estimate.variants} == {"control": 40, "staging": 0}
    assert estimate.units is not None and estimate.units.outside == DEMO_UNITS
    assert estimate.warnings == ()


SPLIT_SPEC = "name: from-the-page\nexperiment: triage-split\ndataset: tickets\n"


def test_the_runs_page_estimates_a_spec_with_its_units_and_warnings(sim_at_once: None) -> None:
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    at.text_area(key="spec_text").set_value(SPLIT_SPEC)
    at.button(key="estimate_run").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests"] == "40" and metrics["Units"] == str(DEMO_UNITS)
    assert metrics["Cost"].startswith("$")
    assert any(shown(w.value).startswith("Too few units for a 70/30 split") for w in at.warning)
    split = at.dataframe[0].value
    assert list(split["variant"]) == ["control", "staging"]
    assert split["units"].sum() == DEMO_UNITS and split["requests"].sum() == DEMO_ROWS
    assert list(split["weight share"]) == ["70%", "30%"]


def test_a_request_file_sent_as_written_is_estimated_from_its_lines(
    wb: Workbench, tmp_path: Path
) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        "".join(
            json.dumps(
                {
                    "custom_id": f"r-{i}",
                    "body": {
                        "max_tokens": 60,
                        "messages": [
                            {
                                "role": "user",
                                "content": f"Summarize ticket {i}: the export button fails.",
                            }
                        ],
                    },
                }
            )
            + "\n"
            for i in range(12)
        )
    )
    _, ratios, _ = run_and_compare(wb, wb.runs.batch_spec(requests, "sim", "fast"))
    assert_within(ratios)
