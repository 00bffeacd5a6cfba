"""The Compare page, driven by Streamlit's AppTest on a real database and the sim model."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec
from promptlab.ui.resources import get_workbench
from promptlab.workbench import srm_figures
from tests.apptest_helpers import shown

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "compare.py")
TIMEOUT_S = 30
#: Figures the page draws for a run with two variants: forest, rates, latency
#: percentiles, latency ECDF, over time.
CHARTS = 5


def open_page(run_id: str | None = None) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    if run_id is not None:
        at.query_params["run"] = run_id
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def demo_run() -> str:
    """The demo experiment's split run (control 70 / staging 30), finished."""
    wb = get_workbench()
    run_id = wb.start_demo_run()
    assert run_id is not None
    assert wb.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


@pytest.fixture
def all_mode_run(tmp_path: Path) -> str:
    """Twelve rows, each through two differently worded variants."""
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(12)))
    variant = {"model": "sim:fast", "params": {"max_tokens": 24}}
    spec = parse_spec(
        {"name": "all-mode", "dataset": str(dataset), "variants": [
            {"name": "terse", "messages": [{"role": "user", "content": "Say {{ text }}"}],
             **variant},
            {"name": "wordy", "messages": [{"role": "user", "content": "Explain {{ text }}"}],
             **variant}]}
    )  # fmt: skip
    wb = get_workbench()
    run_id = wb.start_run(spec)
    assert wb.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


def charts(at: AppTest) -> list[object]:
    return list(at.get("plotly_chart"))


def test_without_results_the_page_says_so() -> None:
    at = open_page()
    assert any("No results yet" in i.value for i in at.info)
    assert not charts(at)


def test_the_demo_split_run_shows_verdicts_srm_and_charts(demo_run: str) -> None:
    at = open_page()
    assert at.selectbox(key="compare_run").value == demo_run
    assert at.query_params["run"] in (demo_run, [demo_run])  # the link to share
    assert at.selectbox(key=f"control_{demo_run}").value == "control"
    table = at.dataframe[0].value
    assert list(table["metric"]) == ["completion rate", "latency p50", "latency p90", "latency p99"]
    assert set(table["variant"]) == {"staging"}
    comparison = get_workbench().compare(demo_run)
    for cells, row in zip(table.to_dict("records"), comparison.rows, strict=True):
        assert cells["verdict"].endswith(str(row.verdict))
        assert cells["n"] == f"{row.n_control}/{row.n_variant}"
    assert comparison.srm is not None and not comparison.srm.mismatch
    assert shown(at.success[0].value) == f"SRM check passed: {srm_figures(comparison.srm)}"
    assert not at.error
    assert any("units per arm" in c.value for c in at.caption)
    assert len(charts(at)) == CHARTS
    # A split run sends each input to one variant: nothing to put side by side.
    assert any("all-mode run" in i.value for i in at.info)


def test_a_bigger_mde_needs_fewer_units(demo_run: str) -> None:
    at = open_page()

    def needed() -> int:
        text = next(c.value for c in at.caption if "units per arm" in c.value)
        return int(text.split("Sample size: ", 1)[1].split()[0])

    before = needed()
    at.number_input(key="compare_mde").set_value(20.0).run()
    assert not at.exception
    assert needed() < before


def test_side_by_side_of_an_all_mode_run_marks_the_differences(
    demo_run: str, all_mode_run: str
) -> None:
    at = open_page(all_mode_run)  # the deep link wins over the newest run
    assert at.selectbox(key="compare_run").value == all_mode_run
    assert any("No SRM check" in c.value for c in at.caption)
    assert at.dataframe[0].value["test"][0] == "McNemar exact"
    page = get_workbench().side_by_side(all_mode_run, limit=10)
    assert page.total == 12
    boxes = [h.proto.body for h in at.html]
    assert len(boxes) == 2 * len(page.rows) == 20  # a box per variant per input
    assert any("<ins" in b for b in boxes) and any("<del" in b for b in boxes)
    at.number_input(key=f"sbs_page_{all_mode_run}_False").set_value(2).run()
    assert not at.exception
    assert len(at.html) == 2 * 2  # rows 11 and 12


def test_picking_the_other_way_round_swaps_control(all_mode_run: str) -> None:
    at = open_page(all_mode_run)
    at.selectbox(key=f"control_{all_mode_run}").select("wordy").run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert set(table["variant"]) == {"terse"}
