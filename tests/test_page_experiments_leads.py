"""The Experiments page leads (issue 22): it opens on a dataset that fits the experiment,
says what is missing instead of failing, picks prompt versions from a list and gives a
dataset a unit column on the spot; and every page of the app has its own address."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.audit.chain import CHANGES_CHAIN
from promptlab.errors import DatasetError
from promptlab.store.audit import AuditFilter
from promptlab.ui.resources import get_workbench
from promptlab.workbench import Workbench
from tests.apptest_helpers import shown

ROOT = Path(__file__).resolve().parent.parent
PAGE = str(ROOT / "pages" / "experiments.py")
APP = str(ROOT / "app.py")
TIMEOUT_S = 30


def open_page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    return at


def add_articles(wb: Workbench, tmp_path: Path) -> None:
    """A dataset without the demo experiment's unit column (customer_id) and without a
    unit column of its own; its name sorts before the demo's `tickets`."""
    path = tmp_path / "articles.csv"
    path.write_text("article_id,ticket\nA1,hello\nA2,world\nA3,again\n", encoding="utf-8")
    wb.datasets.import_file(path, "articles")


def add_experiment(wb: Workbench, name: str, **extra: object) -> None:
    wb.experiments.add(
        {
            "name": name,
            **extra,
            "variants": [
                {"name": "control", "prompt": "ticket-triage@1.0.0", "weight": 50, "control": True},
                {"name": "staging", "prompt": "ticket-triage@staging", "weight": 50},
            ],
        }
    )


def changes(wb: Workbench, kind: str) -> list[dict[str, object]]:
    events = wb.audit.events(AuditFilter(limit=None))
    return [dict(e.payload) for e in events if e.chain == CHANGES_CHAIN and e.kind == kind]


# ---- a dataset that fits ---------------------------------------------------------------


def test_the_page_opens_on_a_dataset_that_has_the_experiments_unit_column(
    tmp_path: Path,
) -> None:
    add_articles(get_workbench(), tmp_path)
    at = open_page()
    assert not at.error, [e.value for e in at.error]
    # The first dataset with customer_id: the demo's 400 customers (800 tickets).
    assert at.selectbox(key="launch_triage-split_dataset").value == "customers"
    assert at.selectbox(key="launch_triage-split_customers_unit").value == "customer_id"
    assert {m.label: m.value for m in at.metric}["Requests"] == "800"


def test_a_dataset_without_the_unit_column_asks_for_one_without_an_error(
    tmp_path: Path,
) -> None:
    add_articles(get_workbench(), tmp_path)
    at = open_page()
    at.selectbox(key="launch_triage-split_dataset").select("articles").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key="launch_triage-split_articles_unit").value is None
    said = " ".join(shown(i.value) for i in at.info)
    assert "articles has no column customer_id" in said and "choose" in said.lower()
    assert not at.metric and not any(b.key == "launch_triage-split_start" for b in at.button)


def test_when_no_dataset_fits_the_page_says_what_is_needed() -> None:
    wb = get_workbench()
    add_experiment(wb, "by-session", unit_column="session_id")
    at = open_page()
    at.selectbox(key="experiment_choice").select("by-session").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    warned = " ".join(shown(w.value) for w in at.warning)
    assert "No dataset has the column session_id" in warned
    # The dataset's own unit column stands in, and the page says so.
    assert at.selectbox(key="launch_by-session_customers_unit").value == "customer_id"
    assert any("splits by customer_id" in shown(c.value) for c in at.caption)


# ---- prompt versions from a list -----------------------------------------------------


def test_prompt_versions_are_picked_from_a_list() -> None:
    wb = get_workbench()
    at = open_page()
    assert not any(t.key == "new_v0_version" for t in at.text_input)
    picker = at.selectbox(key="new_v0_prompt")
    assert "ticket-triage@1.0.0" in picker.options
    assert "ticket-triage@1.1.0 (production)" in picker.options
    at.text_input(key="new_name").input("from-the-list")
    at.text_input(key="new_unit").input("customer_id")
    at.selectbox(key="new_v0_prompt").select("ticket-triage@1.0.0")
    at.selectbox(key="new_v1_prompt").select("ticket-triage@2.0.0")
    next(b for b in at.button if b.label == "Create experiment").click()
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    config = wb.experiments.get("from-the-list")
    pinned = {v.name: v.prompt_version_id for v in config.variants}
    assert pinned == {
        "control": wb.prompts.resolve("ticket-triage@1.0.0").id,
        "variant-1": wb.prompts.resolve("ticket-triage@2.0.0").id,
    }


# ---- a unit column on the spot ---------------------------------------------------------


def test_a_dataset_gets_its_unit_column_on_the_spot(tmp_path: Path) -> None:
    wb = get_workbench()
    add_articles(wb, tmp_path)
    at = open_page()
    at.selectbox(key="launch_triage-split_dataset").select("articles").run()
    at.selectbox(key="launch_triage-split_articles_unit").select("article_id").run()
    at.button(key="launch_triage-split_articles_save_unit").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert wb.datasets.get("articles").unit_column == "article_id"
    assert any("articles now has unit column article_id" in shown(s.value) for s in at.success)
    assert changes(wb, "dataset.unit_column_set") == [
        {"dataset": "articles", "unit_column": "article_id"}
    ]
    at.run()  # saved: the button is gone, the run can be estimated
    assert not any(b.key == "launch_triage-split_articles_save_unit" for b in at.button)
    assert {m.label: m.value for m in at.metric}["Requests"] == "3"


def test_a_bad_unit_column_is_one_error_naming_the_dataset_and_column(tmp_path: Path) -> None:
    wb = get_workbench()
    add_articles(wb, tmp_path)
    with pytest.raises(DatasetError) as raised:
        wb.datasets.set_unit_column("articles", "user")
    assert str(raised.value) == (
        "articles: unit column 'user' is not a column; columns: article_id, ticket"
    )
    assert wb.datasets.get("articles").unit_column is None
    assert changes(wb, "dataset.unit_column_set") == []


# ---- every page at its own address -------------------------------------------------------

PAGES = {
    "compare": "Compare",
    "prompts": "Prompts",
    "runs": "Runs",
    "datasets": "Datasets",
    "experiments": "Experiments",
    "audit": "Audit",
}


def test_every_page_has_its_own_url_path() -> None:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Prompts"]  # `/` goes on to Prompts (no results)
    registered = at._registered_pages.values()
    paths = {info["url_pathname"]: info.get("page_name") for info in registered}
    assert {p: paths.get(p) for p in PAGES} == PAGES
    for path, title in PAGES.items():
        at.switch_page(f"pages/{path}.py").run()
        assert not at.exception, at.exception
        assert [t.value for t in at.title] == [title]


def test_launching_in_all_mode_needs_no_unit_column() -> None:
    add_experiment(get_workbench(), "by-session", unit_column="session_id")
    at = open_page()
    at.selectbox(key="experiment_choice").select("by-session").run()
    assert at.warning
    at.selectbox(key="launch_by-session_dataset").select("tickets").run()
    at.selectbox(key="launch_by-session_mode").select("all").run()
    assert not at.error and not at.warning, [w.value for w in at.warning]
    assert {m.label: m.value for m in at.metric}["Requests"] == "80"  # 40 rows, 2 variants
