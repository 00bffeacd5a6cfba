"""The Runs page, driven by Streamlit's AppTest against the real engine and database."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec_text
from promptlab.ui.resources import get_engine

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")
TIMEOUT_S = 30


def spec_text(dataset: Path) -> str:
    return (
        f"name: from-the-page\ndataset: {dataset}\nvariants:\n"
        "  - messages: [{role: user, content: 'Say {{ text }}'}]\n"
        "    model: sim:fast\n    params: {max_tokens: 16}\n"
    )


def write_rows(tmp_path: Path, rows: int = 3) -> Path:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(rows)))
    return dataset


def test_empty_page_says_so() -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    assert any("No runs yet" in i.value for i in at.info)


def test_a_finished_run_is_listed_with_its_counts_and_resume_disabled(tmp_path: Path) -> None:
    engine = get_engine()
    run_id = engine.submit(parse_spec_text(spec_text(write_rows(tmp_path))))
    assert engine.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["run"]) == [run_id]
    assert list(table["status"]) == ["completed"]
    assert any(m.label == "Succeeded" and m.value == "3" for m in at.metric)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Attempts"] == "3" and metrics["429s"] == "0"
    assert metrics["Latency p50"].endswith(" ms") and metrics["Latency p95"].endswith(" ms")
    buttons = {b.label: b for b in at.button}
    assert buttons["Resume"].disabled and buttons["Cancel"].disabled


def test_start_a_run_from_the_form_then_cancel_and_resume_buttons_work(tmp_path: Path) -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    at.text_area(key="spec_text").set_value(spec_text(write_rows(tmp_path, rows=40)))
    at.button(key="start_run").click().run()
    assert not at.exception
    started = [s.value for s in at.success]
    assert started and started[0].startswith("Started run_")
    run_id = started[0].split()[-1]
    engine = get_engine()
    at.button(key=f"cancel_{run_id}").click().run()
    assert engine.wait(run_id, timeout=TIMEOUT_S).status in ("cancelled", "completed")
    at.run()
    if engine.status(run_id).status == "cancelled":
        at.button(key=f"resume_{run_id}").click().run()
        assert not at.exception
    final = engine.wait(run_id, timeout=TIMEOUT_S)
    assert final.status == "completed" and final.succeeded == 40


def test_a_bad_spec_shows_the_error() -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    at.text_area(key="spec_text").set_value("variants: []\ndataset: x.csv\n")
    at.button(key="start_run").click().run()
    assert any("variants" in e.value for e in at.error)


def test_the_example_spec_runs_the_demo_ab_as_it_stands() -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    at.button(key="start_run").click().run()
    assert not at.exception
    started = [s.value for s in at.success]
    assert started, [e.value for e in at.error]
    final = get_engine().wait(started[0].split()[-1], timeout=120)
    assert final.status == "completed"
    assert final.succeeded == 80  # 40 demo tickets x 2 variants


def test_failed_items_are_listed_with_their_reason(tmp_path: Path) -> None:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("other\nx\ny\n")  # no `text` column: every row misses the variable
    engine = get_engine()
    run_id = engine.submit(parse_spec_text(spec_text(dataset)))
    assert engine.wait(run_id, timeout=TIMEOUT_S).failed == 2
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert at.selectbox[0].value == run_id  # the only run of this test's database
    tables = [d.value for d in at.dataframe if "dataset row" in d.value.columns]
    assert tables, "no table of failed items"
    assert list(tables[0]["dataset row"]) == [1, 2]
    assert "'text' is a required property" in tables[0]["message"][0]
