"""The Experiments page, driven by Streamlit's AppTest on a real database and the sim model."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "experiments.py")
TIMEOUT_S = 30


def open_page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    return at


def button(at: AppTest, label: str) -> object:
    return next(b for b in at.button if b.label == label)


def test_the_demo_experiment_is_listed_with_its_split() -> None:
    at = open_page()
    table = at.dataframe[0].value
    assert list(table["experiment"]) == ["triage-split"]
    assert list(table["split"]) == ["control 70 / staging 30"]
    assert at.selectbox(key="experiment_choice").value == "triage-split"


def test_create_a_70_30_experiment_from_two_versions_in_the_form() -> None:
    at = open_page()
    at.text_input(key="new_name").input("triage-v1-vs-v11")
    at.text_input(key="new_unit").input("customer_id")
    at.selectbox(key="new_v0_prompt").select("ticket-triage@1.0.0")
    at.number_input(key="new_v0_weight").set_value(70.0)
    at.selectbox(key="new_v1_prompt").select("ticket-triage@1.1.0")
    at.number_input(key="new_v1_weight").set_value(30.0)
    button(at, "Create experiment").click()  # type: ignore[attr-defined]
    at.run()
    assert not at.exception, at.exception
    assert [shown(s.value) for s in at.success] == ["Created triage-v1-vs-v11"]
    config = get_workbench().experiments.get("triage-v1-vs-v11")
    assert config.weights == {"control": 70.0, "variant-1": 30.0}
    assert config.bucket_counts() == {"control": 7000, "variant-1": 3000}
    wb = get_workbench()
    assert (
        config.variant("control").prompt_version_id == wb.prompts.resolve("ticket-triage@1.0.0").id
    )
    assert at.selectbox(key="experiment_choice").value == "triage-v1-vs-v11"


def test_a_bad_form_names_the_problem_and_saves_nothing() -> None:
    at = open_page()
    at.text_input(key="new_name").input("Bad Name")
    button(at, "Create experiment").click()  # type: ignore[attr-defined]
    at.run()
    assert not at.exception, at.exception
    assert at.error and "name" in at.error[0].value
    assert [c.name for c in get_workbench().experiments.list()] == ["triage-split"]


def test_launch_on_the_demo_dataset_shows_the_estimate_and_follows_the_run() -> None:
    at = open_page()
    # The demo's two datasets, the 400 customers first; the 40 tickets launch quicker.
    assert at.selectbox(key="launch_triage-split_dataset").value == "customers"
    at.selectbox(key="launch_triage-split_dataset").select("tickets").run()
    assert at.selectbox(key="launch_triage-split_tickets_unit").value == "customer_id"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests"] == "40"  # split: one request per ticket
    assert metrics["Cost"].startswith("$")
    at.button(key="launch_triage-split_start").click().run()
    assert not at.exception, at.exception
    run_id = at.session_state["launched_run"]
    assert get_workbench().runs.wait(run_id, 60).status == "completed"
    at.run()
    progress = at.get("progress")[-1]
    assert "completed: 40 of 40 items closed" in progress.proto.text
    variants = at.dataframe[-1].value
    assert set(variants["variant"]) == {"control", "staging"}
    assert variants["items"].sum() == 40


def test_weights_and_ramp_save_a_new_revision() -> None:
    at = open_page()
    at.number_input(key="w_triage-split_1_control").set_value(50.0)
    at.number_input(key="w_triage-split_1_staging").set_value(50.0)
    at.slider(key="ramp_triage-split_1").set_value(20.0)
    at.text_input(key="note_triage-split_1").input("even split, slow ramp")
    button(at, "Save as new revision").click()  # type: ignore[attr-defined]
    at.run()
    assert not at.exception, at.exception
    # Nothing changes before a confirmation that names every change.
    assert get_workbench().experiments.get("triage-split").revision == 1
    assert [shown(w.value) for w in at.warning] == [
        "Save revision 2 of triage-split: weight control 70 → 50; weight staging 30 → 50; "
        "ramp 100% → 20%? The gateway and exported configs assign units by it from then on."
    ]
    button(at, "Keep it as it is").click()  # type: ignore[attr-defined]
    at.run()
    assert get_workbench().experiments.get("triage-split").revision == 1
    assert not at.warning
    button(at, "Save as new revision").click()  # type: ignore[attr-defined]
    at.run()
    button(at, "Yes, save this revision").click()  # type: ignore[attr-defined]
    at.run()
    assert not at.exception, at.exception
    config = get_workbench().experiments.get("triage-split")
    assert (config.revision, config.ramp, config.note) == (2, 20.0, "even split, slow ramp")
    assert config.weights == {"control": 50.0, "staging": 50.0}
    history = at.dataframe[1].value
    assert list(history["revision"]) == [2, 1]


def test_the_kill_switch_asks_before_it_acts() -> None:
    at = open_page()
    at.button(key="kill_triage-split").click().run()
    assert get_workbench().experiments.get("triage-split").killed is False  # not yet
    assert any("Send every unit of triage-split to control" in shown(e.value) for e in at.error)
    at.button(key="kill_no_triage-split").click().run()
    assert get_workbench().experiments.get("triage-split").killed is False
    at.button(key="kill_triage-split").click().run()
    at.button(key="kill_yes_triage-split").click().run()
    assert not at.exception, at.exception
    config = get_workbench().experiments.get("triage-split")
    assert config.killed and config.revision == 2 and config.note == "kill switch"
    assert any("Killed" in w.value for w in at.warning)
    at.button(key="revive_triage-split").click().run()
    assert get_workbench().experiments.get("triage-split").killed is True  # it asks first
    assert any("Revive triage-split?" in shown(w.value) for w in at.warning)
    button(at, "Yes, revive it").click()  # type: ignore[attr-defined]
    at.run()
    assert get_workbench().experiments.get("triage-split").killed is False


def test_each_experiment_shows_and_saves_its_own_weights() -> None:
    wb = get_workbench()
    wb.experiments.add(
        {
            "name": "other",
            "variants": [
                {"name": "control", "prompt": "ticket-triage@1.0.0", "weight": 50, "control": True},
                {"name": "staging", "prompt": "ticket-triage@staging", "weight": 50},
            ],
        }
    )
    at = open_page()
    at.selectbox(key="experiment_choice").select("triage-split").run()
    assert at.number_input(key="w_triage-split_1_control").value == 70.0
    at.selectbox(key="experiment_choice").select("other").run()
    # Same variant names, another experiment: its own stored weights, not the last shown.
    assert at.number_input(key="w_other_1_control").value == 50.0
    at.slider(key="ramp_other_1").set_value(40.0)
    button(at, "Save as new revision").click()  # type: ignore[attr-defined]
    at.run()
    button(at, "Yes, save this revision").click()  # type: ignore[attr-defined]
    at.run()
    saved = wb.experiments.get("other")
    assert (saved.revision, saved.ramp, saved.weights) == (2, 40.0, {"control": 50, "staging": 50})
    assert wb.experiments.get("triage-split").revision == 1


def test_a_dataset_without_a_unit_column_asks_for_one() -> None:
    wb = get_workbench()
    wb.datasets.set_unit_column("tickets", None)
    wb.datasets.set_unit_column("customers", None)
    wb.experiments.add(
        {
            "name": "no-unit",
            "variants": [
                {"name": "control", "prompt": "ticket-triage@1.0.0", "weight": 50, "control": True},
                {"name": "staging", "prompt": "ticket-triage@staging", "weight": 50},
            ],
        }
    )
    at = open_page()
    at.selectbox(key="experiment_choice").select("no-unit").run()
    at.selectbox(key="launch_no-unit_dataset").select("tickets").run()
    assert at.selectbox(key="launch_no-unit_tickets_unit").value is None
    # Not an error: the page says what is needed (issue 22).
    assert not at.error, [e.value for e in at.error]
    assert any("No dataset has a unit column" in shown(w.value) for w in at.warning)
    assert any("tickets has no unit column: choose" in shown(i.value) for i in at.info)


def test_a_name_that_exists_is_refused_and_the_experiment_is_left_as_it_was() -> None:
    """New experiment under the demo's name: refused in one line offering the real
    action; it made revision 2 (50/50, variants renamed) while saying "Created"."""
    at = open_page()
    before = get_workbench().experiments.get("triage-split")
    at.text_input(key="new_name").input("triage-split")
    button(at, "Create experiment").click()  # type: ignore[attr-defined]
    at.run()
    assert not at.exception, at.exception
    assert not at.success
    assert [shown(e.value) for e in at.error] == [
        "An experiment named triage-split exists: choose it below to change its split "
        "(saved as a new revision), or give this one another name"
    ]
    after = get_workbench().experiments.get("triage-split")
    assert (after.revision, after.weights) == (before.revision, before.weights)
