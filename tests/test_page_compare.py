"""The Compare page, driven by Streamlit's AppTest on a real database and the sim model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.analysis.compare import FINAL_LOOK
from promptlab.analysis.stats import Verdict
from promptlab.engine import parse_spec
from promptlab.ui.resources import get_workbench
from promptlab.views.charts import ECDF_POINTS
from promptlab.views.compare import answer_sentences, fmt_p, srm_verdict, verdict_text
from tests.apptest_helpers import shown

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "compare.py")
TIMEOUT_S = 30
#: Figures the page draws for a run with two variants: forest, rates, latency
#: percentiles, latency ECDF, over time.
CHARTS = 5
#: The session keys of the open tab: a run's, two versions', production logs'.
RUN_TAB, VERSIONS_TAB, LOGS_TAB = "compare_tab", "compare_tab_versions", "compare_tab_logs"


def open_page(run_id: str | None = None, tab: str | None = None) -> AppTest:
    """The page as a link opens it: `?run=RUN_ID&tab=TAB`."""
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    if run_id is not None:
        at.query_params["run"] = run_id
    if tab is not None:
        at.query_params["tab"] = tab
    at.run()
    assert not at.exception, at.exception
    return at


def open_tab(at: AppTest, tab: str, key: str = RUN_TAB) -> AppTest:
    """Open `tab` as a click on it does: the page runs again, that tab alone."""
    at.session_state[key] = tab
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def demo_run(demo_db_once: Path, db_path: Path) -> str:
    """The demo experiment's split run (control 70 / staging 30), finished, with its
    simulated clicks: the app's database is a copy of the session's `init --demo` one."""
    shutil.copyfile(demo_db_once, db_path)
    (listed,) = get_workbench().runs.list()
    assert listed.run.name == "demo: triage-split on customers"
    assert listed.run.status == "completed"
    return listed.run.run_id


@pytest.fixture
def all_mode_run(tmp_path: Path) -> str:
    """Twelve rows, each through two differently worded variants."""
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(12)))
    variant = {"model": "sim:fast", "params": {"max_tokens": 24}}
    spec = parse_spec(
        {
            "name": "all-mode",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "terse",
                    "messages": [{"role": "user", "content": "Say {{ text }}"}],
                    **variant,
                },
                {
                    "name": "wordy",
                    "messages": [{"role": "user", "content": "Explain {{ text }}"}],
                    **variant,
                },
            ],
        }
    )
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
    # The demo's tickets carry their category: its accuracy is a row like completion.
    assert list(table["metric"]) == [
        "completion rate",
        "CTR",
        "score: category",
        "latency p50",
        "latency p90",
        "latency p99",
    ]
    assert set(table["variant"]) == {"staging"}
    comparison = get_workbench().analysis.compare(demo_run)
    for cells, row in zip(table.to_dict("records"), comparison.rows, strict=True):
        assert cells["verdict"].endswith(verdict_text(row))
        assert cells["units"] == f"{row.n_control}/{row.n_variant}"
        assert cells["requests"] == f"{row.requests_control}/{row.requests_variant}"
        assert cells["why"] == row.reason and row.reason
    assert not at.error
    assert any("units per arm" in c.value for c in at.caption)
    assert len(charts(open_tab(at, "Charts"))) == CHARTS
    # A split run sends each input to one variant: nothing to put side by side, and no
    # filter for it either.
    open_tab(at, "Outputs")
    assert any("all-mode run" in i.value for i in at.info)
    assert not at.toggle


def counted(monkeypatch: pytest.MonkeyPatch, *names: str) -> list[str]:
    """The names of the page's reads (`wb.analysis` methods) made from now on."""
    analysis, calls = get_workbench().analysis, []
    for name in names:
        read = getattr(analysis, name)

        def counting(*args: Any, _read: Any = read, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _read(*args, **kwargs)

        monkeypatch.setattr(analysis, name, counting)
    return calls


def test_a_first_view_reads_and_draws_no_figure_until_charts_is_opened(
    demo_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the open tab runs: a fresh browser loads Plotly's code (2.6 times a bare
    page's load, bench/pages.py --elements) only once a Plotly chart is drawn, and the
    figures' own reads wait for them."""
    reads = counted(monkeypatch, "latencies", "metrics_over_time", "repeats")
    at = open_page()
    assert [t.label for t in at.tabs] == ["Answer", "Charts", "Outputs"]
    assert at.dataframe and any(c.value.startswith("Method:") for c in at.caption)
    assert not charts(at) and not reads
    assert "tab" not in at.query_params  # the first tab: no tab in the address
    open_tab(at, "Charts")
    assert len(charts(at)) == CHARTS
    assert sorted(set(reads)) == ["latencies", "metrics_over_time"]
    assert not at.dataframe  # the answer's table is not sent again beside them
    assert at.query_params["tab"] in ("Charts", ["Charts"])  # the link to share
    reads.clear()
    open_tab(at, "Outputs")
    assert not charts(at) and reads == ["repeats"]


def test_a_link_names_the_open_tab(demo_run: str) -> None:
    at = open_page(demo_run, tab="Charts")
    assert len(charts(at)) == CHARTS and not at.dataframe
    assert at.selectbox(key="compare_run").value == demo_run
    open_tab(at, "Answer")  # the first tab again: the address names the run alone
    assert "tab" not in at.query_params and at.query_params["run"] in (demo_run, [demo_run])
    assert not charts(at)
    # A tab the page does not have opens the first one.
    at = open_page(demo_run, tab="Nonsense")
    assert at.session_state[RUN_TAB] == "Answer" and at.dataframe and not charts(at)


def test_the_demo_split_run_answers_in_a_sentence_first(demo_run: str) -> None:
    """Issue 22, item 7: a sentence per variant at the top, the method, and an SRM check
    that does not say "passed" on a handful of customers."""
    at = open_page()
    comparison = get_workbench().analysis.compare(demo_run)
    (sentence,) = answer_sentences(comparison)
    texts = [shown(m.value) for m in at.markdown]
    assert sentence in texts
    # It comes before the table and the figures: the first Markdown of the comparison.
    assert texts.index(sentence) == 0
    assert "staging against control" in sentence and "units" in sentence
    assert comparison.method == FINAL_LOOK  # the demo run is finished: its final look
    method = next(c for c in at.caption if c.value.startswith("Method:"))
    assert "fixed horizon" in method.value and method.help
    # Which metric decides, its names as compare gives them (CTR, not ctr).
    decides = [shown(c.value) for c in at.caption if "primary" in c.value]
    assert decides and decides[0].startswith("Decides: completion rate") and "CTR" in decides[0]
    # 400 customers split 70/30: the SRM check judges them, and passes.
    assert comparison.srm is not None and comparison.srm.judged and not comparison.srm.mismatch
    (srm,) = [m for m in at.success if "SRM check" in m.value]
    assert shown(srm.value) == f"SRM check {srm_verdict(comparison.srm)}"
    # Units enough for the first look to decide something (issue 40, item 6).
    assert any(r.verdict in (Verdict.BETTER, Verdict.WORSE) for r in comparison.rows)
    assert any("adjusted by Holm over the declared family" in c.value for c in at.caption)


def specs(at: AppTest) -> dict[str, dict[str, Any]]:
    """The page's figures by their title."""
    found = {}
    for chart in charts(at):
        spec = json.loads(chart.proto.spec)  # type: ignore[attr-defined]
        found[spec["layout"]["title"]["text"]] = spec
    return found


def trace_colours(figures: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """The colours each name is drawn in, over every trace of every figure."""
    seen: dict[str, set[str]] = {}
    for spec in figures.values():
        for trace in spec["data"]:
            colour = trace.get("marker", {}).get("color") or trace.get("line", {}).get("color")
            seen.setdefault(trace.get("legendgroup") or trace["name"], set()).add(colour)
    return seen


def assert_figures_answer_at_a_glance(figures: dict[str, dict[str, Any]], names: list[str]) -> None:
    """One colour per name in every figure; latency percentiles with interval bars; axis
    titles with units, latency's lower and rates' higher is better."""
    assert len(figures) == 5, list(figures)
    colours = trace_colours(figures)
    assert set(colours) == set(names)
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == len(names)  # distinct
    (latency,) = [f for t, f in figures.items() if t.startswith("Latency percentiles")]
    for trace in latency["data"]:
        bars = trace["error_y"]
        assert len(bars["array"]) == 3 and all(v is not None and v >= 0 for v in bars["array"])
        assert all(v is not None and v >= 0 for v in bars["arrayminus"])
    titles = [
        axis["title"]["text"]
        for spec in figures.values()
        for key, axis in spec["layout"].items()
        if key.startswith(("xaxis", "yaxis")) and "title" in axis
    ]
    assert sum("ms" in t and "lower is better" in t for t in titles) >= 4  # each latency axis
    assert sum("higher is better" in t for t in titles) >= 3  # rates, completion, effect


def test_every_figure_draws_a_variant_in_one_colour_with_intervals(demo_run: str) -> None:
    at = open_page(tab="Charts")
    assert_figures_answer_at_a_glance(specs(at), ["control", "staging"])


def test_a_bigger_mde_needs_fewer_units(demo_run: str) -> None:
    at = open_page()

    def needed() -> int:
        text = next(c.value for c in at.caption if "units per arm" in c.value)
        return int(text.split("Sample size: ", 1)[1].split()[0])

    before = needed()
    at.number_input(key="compare_mde").set_value(20.0).run()
    assert not at.exception
    after = needed()
    assert after < before
    # The change picked outlives a look at the figures (two runs without its input).
    open_tab(at, "Charts").run()
    open_tab(at, "Answer")
    assert at.number_input(key="compare_mde").value == 20.0 and needed() == after


def test_side_by_side_of_an_all_mode_run_marks_the_differences(
    demo_run: str, all_mode_run: str
) -> None:
    at = open_page(all_mode_run)  # the deep link wins over the newest run
    assert at.selectbox(key="compare_run").value == all_mode_run
    assert any("No SRM check" in c.value for c in at.caption)
    comparison = get_workbench().analysis.compare(all_mode_run)
    assert at.dataframe[0].value["method"][0] == comparison.rows[0].test
    assert comparison.rows[0].analysed_by == "row"
    assert answer_sentences(comparison)[0] in [shown(m.value) for m in at.markdown]
    # Twelve rows: too few to test, Holm's family is empty (the logs test has one).
    assert all(r.adjusted_p is None for r in comparison.rows)
    assert any("no row could be tested yet" in c.value for c in at.caption)
    assert_figures_answer_at_a_glance(specs(open_tab(at, "Charts")), ["terse", "wordy"])
    open_tab(at, "Outputs")
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


def write_log(path: Path, a: str, b: str, units: int = 120, days: int = 3) -> int:
    """A production log of both versions: `units` users each, a request a day for
    `days` days, some clicked, most completed."""
    lines = [
        f"{v},{v[-5:]}u{i},{100 + i + 7 * d},{str((i + d) % 3 == 0).lower()},"
        f"{str(i % 5 != 0).lower()},2026-11-0{1 + d}T09:{i % 60:02d}:{i // 60:02d}Z\n"
        for v in (a, b)
        for i in range(units)
        for d in range(days)
    ]
    path.write_text("version,unit_id,latency_ms,clicked,completed,event_time\n" + "".join(lines))
    return len(lines)


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
    assert answer_sentences(expected)[0] in [shown(m.value) for m in at.markdown]
    # Results across runs are finished unless said otherwise.
    assert at.segmented_control(key="ver_state_False").value == "Finished"
    assert any(c.value.startswith("Method: **fixed horizon") for c in at.caption)
    assert not charts(at)
    assert len(charts(open_tab(at, "Charts", VERSIONS_TAB))) == 3
    # The same two versions in an imported production log.
    count = write_log(tmp_path / "prod.csv", a, b)
    assert wb.analysis.import_logs(tmp_path / "prod.csv") == count
    at.segmented_control(key="compare_source").set_value("Production logs").run()
    assert not at.exception
    table = at.dataframe[0].value
    logged = wb.analysis.compare_versions(a, b, logs=True)
    assert list(table["metric"]) == [r.metric for r in logged.rows]
    assert table["units"][0] == "120/120" and table["requests"][0] == "360/360"
    at.text_input(key="ver_since_True").input("2030-01-01").run()
    assert any("no production logs" in shown(e.value) for e in at.error)


def open_logs(demo_run: str, tmp_path: Path) -> tuple[AppTest, str, str]:
    """The page on the Production logs source, with a log of the demo's two versions."""
    at = open_page()
    at.segmented_control(key="compare_source").set_value("Production logs").run()
    assert any("Two versions with production logs" in i.value for i in at.info)
    a, b = (r.label for r in get_workbench().analysis.metrics())
    write_log(tmp_path / "prod.csv", a, b)
    get_workbench().analysis.import_logs(tmp_path / "prod.csv")
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="ver_a_True").value == a
    return at, a, b


def test_production_logs_answer_always_valid_with_a_runs_figures(
    demo_run: str, tmp_path: Path
) -> None:
    """Logs keep arriving: always valid by default, fixed horizon once said finished;
    the same five figures as a run, the latency ECDF and the series over time included."""
    at, a, b = open_logs(demo_run, tmp_path)
    wb = get_workbench()
    live = wb.analysis.compare_versions(a, b, logs=True)
    assert live.method == "always valid (mSPRT)"
    assert answer_sentences(live)[0] in [shown(m.value) for m in at.markdown]
    assert any("always valid (mSPRT)" in c.value for c in at.caption if "Method" in c.value)
    assert any("tuned to 1,000 units per arm" in c.value for c in at.caption)
    # The planned horizon is the user's to say (issue 40): the test is tuned to it.
    at.number_input(key="ver_planned_True").set_value(400).run()
    assert any("tuned to 400 units per arm" in c.value for c in at.caption)
    tuned = wb.analysis.compare_versions(a, b, logs=True, planned_units=400)
    assert list(at.dataframe[0].value["p"]) == [fmt_p(r.p_value) for r in tuned.rows]
    tested = sum(r.adjusted_p is not None for r in live.rows)
    # Every row tested but p99 (3 of 360 requests beyond it); the family is the five
    # default metrics all the same (p99 counts as p = 1), and the page says so.
    assert (tested, len(live.rows), live.family_size) == (4, 5, 5)
    assert any("Holm over the declared family's 5 tests" in c.value for c in at.caption)
    figures = specs(open_tab(at, "Charts", LOGS_TAB))
    assert_figures_answer_at_a_glance(figures, [a, b])
    (over_time,) = [f for t, f in figures.items() if t.startswith("Over time")]
    assert {t["name"] for t in over_time["data"]} == {a, b}
    # A bucket an hour, the lines an hour each day: each line breaks between the days.
    assert all(
        [y is None for y in t["y"]] == [False, True, False, True, False] for t in over_time["data"]
    )
    ecdf = figures["Latency distribution (ECDF)"]
    assert [len(t["x"]) for t in ecdf["data"]] == [min(360, ECDF_POINTS)] * 2
    open_tab(at, "Answer", LOGS_TAB)
    at.segmented_control(key="ver_state_True").set_value("Finished").run()
    assert not at.exception
    final = wb.analysis.compare_versions(a, b, logs=True, sequential=False)
    assert any("fixed horizon" in c.value for c in at.caption if "Method" in c.value)
    assert list(at.dataframe[0].value["p"]) == [fmt_p(r.p_value) for r in final.rows]


def test_decide_now_takes_the_final_look_once_and_shows_it_instead(
    demo_run: str, tmp_path: Path
) -> None:
    """Before the planned units are in, the page says when it may decide; then Decide
    now asks, takes the final look once, and the stored decision stands in for the
    live view (who and when said above it)."""
    at, a, b = open_logs(demo_run, tmp_path)  # 120 units per arm
    assert any(
        "Decide now opens once each arm has the planned 1,000 units" in c.value for c in at.caption
    )
    assert not [x for x in at.button if x.label == "Decide now"]
    at.number_input(key="ver_planned_True").set_value(100).run()
    at.button(key=f"decide::{a}::{b}::ask").click().run()
    assert get_workbench().analysis.decisions.get(a, b) is None  # it asks first
    assert any("Take the final look" in shown(w.value) for w in at.warning)
    at.button(key=f"confirm::decide::{a}::{b}::yes").click().run()
    assert not at.exception, at.exception
    decided = get_workbench().analysis.decisions.get(a, b)
    assert decided is not None and decided.record.planned_units == 100
    assert any(f"Decided: {b} against {a}" in shown(i.value) for i in at.info)
    final = get_workbench().analysis.compare_versions(
        a, b, logs=True, sequential=False, planned_units=100
    )
    assert list(at.dataframe[0].value["p"]) == [fmt_p(r.p_value) for r in final.rows]
    assert not [x for x in at.button if x.label == "Decide now"]


def test_cuped_needs_a_since_date(demo_run: str, tmp_path: Path) -> None:
    at, a, b = open_logs(demo_run, tmp_path)
    # The same users' history under the version before both: CUPED's pre-period.
    history = [
        f"ticket-triage@1.0.0,{v[-5:]}u{i},100,{str(i % 3 == 0).lower()},true,"
        f"2026-10-2{d}T09:00:00Z\n"
        for v in (a, b)
        for i in range(120)
        for d in range(3)
    ]
    (tmp_path / "before.csv").write_text(
        "version,unit_id,latency_ms,clicked,completed,event_time\n" + "".join(history)
    )
    get_workbench().analysis.import_logs(tmp_path / "before.csv")
    at.run()
    assert at.checkbox(key="ver_cuped").disabled  # no Since: no pre-period
    at.text_input(key="ver_since_True").input("2026-11-03").run()
    assert not at.checkbox(key="ver_cuped").disabled
    at.checkbox(key="ver_cuped").check().run()
    assert not at.exception, at.exception
    methods = list(at.dataframe[0].value["method"])
    expected = get_workbench().analysis.compare_versions(
        a, b, logs=True, since="2026-11-03", cuped=True
    )
    assert methods == [r.test for r in expected.rows]
    assert any("CUPED" in m for m in methods)
    assert any("CUPED removed" in c.value for c in at.caption)


def test_the_comparison_download_holds_exactly_the_rows_shown(demo_run: str) -> None:
    import duckdb

    wb = get_workbench()
    comparison = wb.analysis.compare(demo_run)
    at = open_page()
    data = wb.exports.comparison_bytes(comparison, "parquet")
    table = at.dataframe[0].value
    at.button(key=f"dl_cmp_{demo_run}::make").click().run()
    assert [b for b in at.get("download_button") if b.key == f"dl_cmp_{demo_run}::download"]
    with duckdb.connect() as con:
        con.execute("CREATE TABLE f AS SELECT * FROM read_parquet(?)", [_write(data)])
        rows = con.execute("SELECT variant, metric, n_control, n_variant FROM f").fetchall()
    assert [(v, m) for v, m, _, _ in rows] == list(
        zip(table["variant"], table["metric"], strict=True)
    )
    assert [f"{a}/{b}" for _, _, a, b in rows] == list(table["units"])


def _write(data: bytes) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".parquet", delete=False) as handle:
        handle.write(data)
    return handle.name


def test_a_run_of_one_variant_still_gets_its_figures(tmp_path: Path) -> None:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(5)))
    spec = parse_spec(
        {
            "name": "solo",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "only",
                    "messages": [{"role": "user", "content": "Say {{ text }}"}],
                    "model": "sim:fast",
                    "params": {"max_tokens": 24},
                }
            ],
        }
    )
    wb = get_workbench()
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    at = open_page(run_id)
    assert any("one variant" in i.value for i in at.info)
    assert not charts(at)
    figures = specs(open_tab(at, "Charts"))
    assert len(figures) == 4  # no comparison, so no effect chart
    assert set(trace_colours(figures)) == {"only"}
    assert len(trace_colours(figures)["only"]) == 1
