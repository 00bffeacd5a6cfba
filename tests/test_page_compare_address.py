"""The Compare page keeps its whole view in its address (issue 61): the mode, the run, the
versions, the data's state, the planned units and the open tab survive a reload (a new
session at the same address) and a shared link. A stratified view shows each run's
values beside the combined estimate, and every view says its one interval level."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.ui.resources import get_workbench
from promptlab.views.compare import STRATUM_COLUMNS, strata_note, stratum_rows
from tests.apptest_helpers import shown
from tests.test_page_compare import (
    LOGS_TAB,
    PAGE,
    RUN_TAB,
    TIMEOUT_S,
    VERSIONS_TAB,
    all_mode_run,  # noqa: F401 (a fixture)
    charts,
    demo_run,  # noqa: F401 (a fixture)
    open_page,
    open_tab,
    write_log,
)


def address(at: AppTest) -> dict[str, str]:
    """The page's address as a link to share holds it."""
    return {name: at.query_params[name] for name in at.query_params}


def reloaded(at: AppTest) -> AppTest:
    """A reload: a new session at the address the page shows (nothing else carried)."""
    again = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    for name, value in address(at).items():
        again.query_params[name] = value
    again.run()
    assert not again.exception, again.exception
    return again


def test_two_versions_survive_a_reload(demo_run: str) -> None:  # noqa: F811
    at = open_page()
    at.segmented_control(key="compare_source").set_value("Two versions").run()
    a = at.selectbox(key="ver_a_False").value
    b = at.selectbox(key=f"ver_b_False_{a}").value
    at.segmented_control(key="ver_state_False").set_value("Still collecting").run()
    at.number_input(key="ver_planned_False").set_value(400).run()
    open_tab(at, "Charts", VERSIONS_TAB)
    assert not at.exception, at.exception
    wanted = {
        "mode": "versions",
        "a": a,
        "b": b,
        "data": "collecting",
        "planned": "400",
        "tab": "Charts",
    }
    assert address(at) == wanted
    again = reloaded(at)
    assert again.segmented_control(key="compare_source").value == "Two versions"
    assert again.selectbox(key="ver_a_False").value == a
    assert again.selectbox(key=f"ver_b_False_{a}").value == b
    assert again.segmented_control(key="ver_state_False").value == "Still collecting"
    assert again.number_input(key="ver_planned_False").value == 400
    assert again.session_state[VERSIONS_TAB] == "Charts" and len(charts(again)) == 3
    assert address(again) == wanted  # a reload writes back what it read
    # Back on the answer, the same comparison as the address names.
    open_tab(again, "Answer", VERSIONS_TAB)
    assert any("tuned to 400 units per arm" in c.value for c in again.caption)
    # The first mode again: the versions' choices leave the address.
    again.segmented_control(key="compare_source").set_value("A run's variants").run()
    assert address(again) == {"run": demo_run}


def test_production_logs_survive_a_reload(demo_run: str, tmp_path: Path) -> None:  # noqa: F811
    a, b = (r.label for r in get_workbench().analysis.metrics())
    write_log(tmp_path / "prod.csv", a, b)
    get_workbench().analysis.import_logs(tmp_path / "prod.csv")
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    for name, value in {"mode": "logs", "a": b, "b": a, "since": "2026-11-02"}.items():
        at.query_params[name] = value  # a link someone shared: B against A
    at.run()
    assert not at.exception, at.exception
    assert at.segmented_control(key="compare_source").value == "Production logs"
    assert (at.selectbox(key="ver_a_True").value, at.text_input(key="ver_since_True").value) == (
        b,
        "2026-11-02",
    )
    at.segmented_control(key="ver_state_True").set_value("Finished").run()
    at.checkbox(key="ver_cuped").check().run()
    assert not at.exception, at.exception
    assert address(at) == {
        "mode": "logs",
        "a": b,
        "b": a,
        "since": "2026-11-02",
        "data": "finished",
        "cuped": "1",
    }
    again = reloaded(at)
    assert again.segmented_control(key="ver_state_True").value == "Finished"
    assert again.checkbox(key="ver_cuped").value
    expected = get_workbench().analysis.compare_versions(
        b, a, logs=True, since="2026-11-02", sequential=False, cuped=True
    )
    assert list(again.dataframe[0].value["method"]) == [r.test for r in expected.rows]
    assert again.session_state[LOGS_TAB] == "Answer" and "tab" not in address(again)


def test_a_runs_control_variant_tab_and_change_to_detect_survive_a_reload(
    demo_run: str,  # noqa: F811
    all_mode_run: str,  # noqa: F811
) -> None:
    at = open_page(all_mode_run)
    at.selectbox(key=f"control_{all_mode_run}").select("wordy").run()
    at.number_input(key="compare_mde").set_value(2.5).run()
    open_tab(at, "Outputs")
    wanted = {"run": all_mode_run, "control": "wordy", "tab": "Outputs", "mde": "2.5"}
    assert address(at) == wanted
    again = reloaded(at)
    assert again.selectbox(key="compare_run").value == all_mode_run
    assert again.selectbox(key=f"control_{all_mode_run}").value == "wordy"
    assert again.session_state[RUN_TAB] == "Outputs" and len(again.html) == 20  # side by side
    assert address(again) == wanted
    open_tab(again, "Answer")
    assert again.number_input(key="compare_mde").value == 2.5
    assert set(again.dataframe[0].value["variant"]) == {"terse"}


def test_an_address_naming_nonsense_opens_the_defaults_without_an_error(
    demo_run: str,  # noqa: F811
) -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    nonsense = {"mode": "sideways", "control": "nobody", "tab": "Nope", "mde": "-1"}
    for name, value in {**nonsense, "planned": "0", "metric": "x"}.items():
        at.query_params[name] = value
    at.run()
    assert not at.exception, at.exception
    assert at.segmented_control(key="compare_source").value == "A run's variants"
    assert at.selectbox(key=f"control_{demo_run}").value == "control"
    assert at.number_input(key="compare_mde").value == 5.0
    assert address(at) == {"run": demo_run}  # what is shown, at its defaults
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    for name, value in {"mode": "versions", "a": "nope@1", "planned": "abc"}.items():
        at.query_params[name] = value
    at.run()
    assert not at.exception, at.exception
    assert at.segmented_control(key="ver_state_False").value == "Finished"
    assert address(at)["a"] != "nope@1" and "planned" not in address(at)


@pytest.fixture
def two_runs_of_two_versions(runs: tuple[Path, str, str], db_path: Path) -> tuple[str, str]:
    """The demo experiment run twice (split, then all-mode): its two versions are held
    by both runs, a stratified comparison."""
    shutil.copyfile(runs[0], db_path)
    labels = list(dict.fromkeys(r.label for r in get_workbench().analysis.metrics()))
    return labels[0], labels[1]


def test_a_stratified_view_shows_each_runs_values_and_the_combined_estimate(
    two_runs_of_two_versions: tuple[str, str],
) -> None:
    a, b = two_runs_of_two_versions
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    for name, value in {"mode": "versions", "a": a, "b": b}.items():
        at.query_params[name] = value
    at.run()
    assert not at.exception, at.exception
    comparison = get_workbench().analysis.compare_versions(a, b)
    assert len(comparison.strata) == 2
    combined, within = at.dataframe[0].value, at.dataframe[1].value
    assert list(combined["metric"]) == [r.metric for r in comparison.rows]
    # Each version's value is weighted as the delta is: their difference is the delta.
    for row in comparison.rows:
        if row.effect is not None and row.control_value is not None:
            assert row.variant_value is not None
            assert row.variant_value - row.control_value == pytest.approx(row.effect)
    # One line says what the two tables are, then each run's own rows.
    note = strata_note(comparison)
    assert note and note.startswith("Stratified over 2 runs")
    assert note in [shown(c.value) for c in at.caption]
    assert list(within.columns) == list(STRATUM_COLUMNS)
    assert within.to_dict("records") == stratum_rows(comparison)
    assert set(within["run"]) == set(comparison.strata)
    assert len(within) == sum(len(rows) for rows in comparison.strata.values())


def figure_titles(at: AppTest) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in charts(at)]


@pytest.mark.parametrize(
    ("source", "state", "level"),
    [
        (None, None, "96%"),
        ("Two versions", "Still collecting", "99%"),
        ("Two versions", "Finished", "96%"),
    ],
)
def test_every_view_has_one_interval_level_said_in_its_header(
    demo_run: str,  # noqa: F811
    source: str | None,
    state: str | None,
    level: str,
) -> None:
    """The demo's finished run and its two versions: 96% at the final look in either
    mode (the versions' table said 95% of the same data), 99% while collecting; the
    answer's header, the table's and every figure with intervals say the same."""
    at = open_page()
    tab_key = RUN_TAB
    if source is not None:
        at.segmented_control(key="compare_source").set_value(source).run()
        at.segmented_control(key="ver_state_False").set_value(state).run()
        tab_key = VERSIONS_TAB
    assert not at.exception, at.exception
    headers = [c.value for c in at.caption if c.value.startswith("Method:") or " mode (" in c.value]
    assert len(headers) == 2 and all(f"{level} intervals" in h for h in headers), headers
    assert not [c.value for c in at.caption if "% intervals" in c.value and level not in c.value]
    titles = figure_titles(open_tab(at, "Charts", tab_key))
    assert f"Effect against control ({level} interval)" in titles
    assert f"Rates ({level} interval, per unit)" in titles
    assert f"Latency percentiles ({level} interval per unit)" in titles
    assert not [t for t in titles if "%" in t and level not in t], titles
