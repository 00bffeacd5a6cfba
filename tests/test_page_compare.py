"""The Compare page, driven by Streamlit's AppTest on a real database and the sim model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec
from promptlab.ui.resources import get_workbench
from promptlab.views.compare import fmt_p, srm_figures
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
def demo_run(demo_db_once: Path, db_path: Path) -> str:
    """The demo experiment's split run (control 70 / staging 30), finished, with its
    simulated clicks: the app's database is a copy of the session's `init --demo` one."""
    shutil.copyfile(demo_db_once, db_path)
    (listed,) = get_workbench().runs.list()
    assert listed.run.name == "demo: triage-split on tickets"
    assert listed.run.status == "completed"
    return listed.run.run_id


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
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
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
    assert list(table["metric"]) == [
        "completion rate", "CTR", "latency p50", "latency p90", "latency p99"
    ]  # fmt: skip
    assert set(table["variant"]) == {"staging"}
    comparison = get_workbench().analysis.compare(demo_run)
    for cells, row in zip(table.to_dict("records"), comparison.rows, strict=True):
        assert cells["verdict"].endswith(str(row.verdict))
        assert cells["n"] == f"{row.n_control}/{row.n_variant}"
    assert comparison.srm is not None and not comparison.srm.mismatch
    assert shown(at.success[0].value) == f"SRM check passed: {srm_figures(comparison.srm)}"
    assert not at.error
    assert any("units per arm" in c.value for c in at.caption)
    assert len(charts(at)) == CHARTS
    # A split run sends each input to one variant: nothing to put side by side, and no
    # filter for it either.
    assert any("all-mode run" in i.value for i in at.info)
    assert not at.toggle


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
    page = get_workbench().analysis.side_by_side(all_mode_run, limit=10)
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


def test_two_versions_across_runs_and_in_production_logs(demo_run: str, tmp_path: Path) -> None:
    wb = get_workbench()
    at = open_page()
    at.segmented_control(key="compare_source").set_value("Two versions").run()
    assert not at.exception
    a = at.selectbox(key="ver_a_False").value
    b = at.selectbox(key=f"ver_b_False_{a}").value
    table = at.dataframe[0].value
    expected = wb.analysis.compare_versions(a, b)
    assert list(table["metric"]) == [r.metric for r in expected.rows]
    assert list(table["p"]) == [fmt_p(r.p_value) for r in expected.rows]
    assert any("not split by an experiment" in c.value for c in at.caption)
    assert len(charts(at)) == 3
    # The same two versions in an imported production log.
    log = tmp_path / "prod.csv"
    log.write_text(
        "version,unit_id,latency_ms,clicked,completed,event_time\n"
        + "".join(
            f"{v},u{i},{100 + i},{str(i % 3 == 0).lower()},true,2026-11-01T09:00:00Z\n"
            for v in (a, b)
            for i in range(30)
        )
    )
    assert wb.analysis.import_logs(log) == 60
    at.segmented_control(key="compare_source").set_value("Production logs").run()
    assert not at.exception
    table = at.dataframe[0].value
    logged = wb.analysis.compare_versions(a, b, logs=True)
    assert list(table["metric"]) == [r.metric for r in logged.rows]
    assert table["n"][0] == "30/30"
    at.text_input(key="ver_since_True").input("2030-01-01").run()
    assert any("no production logs" in shown(e.value) for e in at.error)


def test_the_comparison_download_holds_exactly_the_rows_shown(demo_run: str) -> None:
    import duckdb

    wb = get_workbench()
    comparison = wb.analysis.compare(demo_run)
    at = open_page()
    data = wb.exports.comparison_bytes(comparison, "parquet")
    table = at.dataframe[0].value
    assert at.get("download_button")
    with duckdb.connect() as con:
        con.execute("CREATE TABLE f AS SELECT * FROM read_parquet(?)", [_write(data)])
        rows = con.execute("SELECT variant, metric, n_control, n_variant FROM f").fetchall()
    assert [(v, m) for v, m, _, _ in rows] == list(
        zip(table["variant"], table["metric"], strict=True)
    )
    assert [f"{a}/{b}" for _, _, a, b in rows] == list(table["n"])


def _write(data: bytes) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".parquet", delete=False) as handle:
        handle.write(data)
    return handle.name
