"""The Datasets page, driven by Streamlit's AppTest on a real database."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.config import DEMO_DIR
from promptlab.data.demo import load_demo_prompts
from promptlab.errors import DatasetError
from promptlab.prompts.registry import Registry
from promptlab.ui.resources import get_workbench
from promptlab.ui.uploads import dataset_name_for, saved_upload
from tests.apptest_helpers import shown

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "datasets.py")
TIMEOUT_S = 30
TICKETS = (DEMO_DIR / "tickets.csv").read_bytes()


@pytest.fixture(autouse=True)
def prompts_without_demo_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo prompts, but not the demo dataset the app's first start would import."""
    monkeypatch.setenv("PROMPTLAB_DEMO", "0")
    load_demo_prompts(Registry(get_workbench().store))


def open_page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    return at


def upload(at: AppTest, name: str, content: bytes, dataset: str = "", unit: str = "") -> AppTest:
    at.file_uploader(key="dataset_upload").upload(name, content, "text/csv")
    at.run()
    at.text_input(key="dataset_name").input(dataset)
    at.text_input(key="dataset_unit").input(unit)
    at.button(key="dataset_import").click().run()
    assert not at.exception, at.exception
    return at


def test_empty_page_offers_the_import_form() -> None:
    at = open_page()
    assert any("No datasets yet" in i.value for i in at.info)
    assert at.button(key="dataset_import").disabled  # nothing uploaded yet


def test_upload_imports_lists_and_shows_the_dataset() -> None:
    at = upload(open_page(), "Tickets.csv", TICKETS, unit="customer_id")
    assert [s.value for s in at.success] == ["Imported tickets: 40 rows, 5 columns"]
    table = at.dataframe[0].value
    assert list(table["dataset"]) == ["tickets"]
    assert list(table["rows"]) == [40] and list(table["unit column"]) == ["customer_id"]
    assert at.selectbox(key="dataset_choice").value == "tickets"
    types = at.dataframe[1].value
    assert list(types["column"]) == [
        "ticket_id",
        "customer_id",
        "ticket",
        "customer_tier",
        "category",
    ]
    assert set(types["type"]) == {"VARCHAR"}
    preview = at.dataframe[2].value
    assert len(preview) == 20 and list(preview.index)[:2] == [1, 2]  # row numbers from 1
    assert preview["ticket_id"].iloc[0] == "T-1001"
    info = get_workbench().datasets.get("tickets")
    assert (info.source, info.unit_column) == ("Tickets.csv", "customer_id")


def test_a_malformed_upload_shows_the_place_and_stores_nothing() -> None:
    at = upload(open_page(), "few.csv", b"a,b,c\n1,2,3\n4,5\n", dataset="few")
    assert [shown(e.value) for e in at.error] == ["few.csv, line 3: expected 3 fields, found 2"]
    assert get_workbench().datasets.list() == []


def test_unit_column_picker_saves(tmp_path: Path) -> None:
    get_workbench().datasets.import_file(DEMO_DIR / "tickets.csv", "tickets")
    at = open_page()
    picker = at.selectbox(key="unit_tickets")
    assert picker.value == "(none)"
    picker.set_value("customer_id")
    at.button(key="unit_save_tickets").click().run()
    assert not at.exception
    assert get_workbench().datasets.get("tickets").unit_column == "customer_id"
    assert any("Unit column: customer_id" in shown(s.value) for s in at.success)


def test_check_rows_shows_the_bad_rows(tmp_path: Path) -> None:
    data = tmp_path / "mixed.csv"
    data.write_text("ticket,customer_tier\nfine,pro\nbad plan,gold\n", encoding="utf-8")
    get_workbench().datasets.import_file(data, "mixed")
    at = open_page()
    at.selectbox(key="check_prompt").set_value("ticket-triage").run()
    at.selectbox(key="check_ref").set_value("staging").run()
    at.button(key="check_rows").click().run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Rows": "2", "Valid": "1", "Bad": "1"}
    problems = at.dataframe[-1].value
    assert problems.to_dict("records") == [
        {
            "row": 2,
            "column": "customer_tier",
            "problem": "'gold' is not one of ['free', 'pro', 'enterprise']",
        }
    ]


def test_delete_removes_the_dataset(tmp_path: Path) -> None:
    get_workbench().datasets.import_file(DEMO_DIR / "tickets.csv", "tickets")
    at = open_page()
    at.button(key="dataset_delete_tickets").click().run()
    assert not at.exception
    # It asks first, naming what goes; "Keep it" keeps it.
    assert [shown(w.value) for w in at.warning] == [
        "Delete dataset tickets (40 rows, 5 columns)? Its rows go; runs keep their own "
        "copy of the rows they used."
    ]
    at.button(key="confirm::dataset_delete::tickets::no").click().run()
    assert [d.name for d in get_workbench().datasets.list()] == ["tickets"]
    at.button(key="dataset_delete_tickets").click().run()
    at.button(key="confirm::dataset_delete::tickets::yes").click().run()
    assert not at.exception
    assert get_workbench().datasets.list() == []
    assert any("No datasets yet" in i.value for i in at.info)


def test_saved_upload_is_bounded_and_removed_afterwards() -> None:
    with saved_upload(io.BytesIO(b"a\n1\n"), "../../etc/x.csv", 4) as path:
        assert path.name == "x.csv" and path.read_bytes() == b"a\n1\n"
        folder = path.parent
    assert not folder.exists()
    refused = r"^big\.csv: 4 bytes, more than the 3 an upload may have$"
    with (
        pytest.raises(DatasetError, match=refused),
        saved_upload(io.BytesIO(b"a\n1\n"), "big.csv", 4, max_bytes=3),
    ):
        pass
    assert dataset_name_for("My Tickets (2024).CSV") == "my-tickets-2024"


LOG = (
    "ver,user,ms,click,done,ts\n"
    "ticket-triage@production,u1,120.5,true,true,2026-11-01T09:00:00Z\n"
    "ticket-triage@production,u2,80,false,true,2026-11-01T09:01:00Z\n"
)


def import_log(at: AppTest, content: str) -> AppTest:
    at.radio(key="fb_kind").set_value("Production logs").run()
    at.file_uploader(key="fb_upload").upload("prod.csv", content.encode(), "text/csv")
    at.run()
    mapping = {"version": "ver", "unit_id": "user", "latency_ms": "ms", "clicked": "click"}
    for field, column in {**mapping, "completed": "done", "event_time": "ts"}.items():
        at.text_input(key=f"fb_col_{field}").input(column)
    return at.button(key="fb_import").click().run()


def test_a_production_log_with_mapped_columns_is_imported_from_the_page() -> None:
    at = import_log(open_page(), LOG)
    assert not at.exception
    assert [shown(s.value) for s in at.success] == ["Imported 2 log rows from prod.csv"]
    (row,) = get_workbench().analysis.log_metrics("ticket-triage")
    assert (row.requests, row.completed, row.clicks) == (2, 2, 1)


def test_a_bad_log_row_is_named_on_the_page_and_nothing_is_imported() -> None:
    at = import_log(open_page(), LOG + "ticket-triage@9.9.9,u3,70,false,true,2026-11-01\n")
    assert not at.success
    (error,) = [shown(e.value) for e in at.error]
    assert error.startswith("prod.csv, row 3, column ver: ") and "9.9.9" in error
    assert get_workbench().analysis.log_metrics("ticket-triage") == []


def test_feedback_events_are_imported_from_the_page() -> None:
    at = open_page()
    content = "version,unit_id,kind\nticket-triage@production,u1,impression\n"
    at.file_uploader(key="fb_upload").upload("fb.csv", content.encode(), "text/csv")
    at.run().button(key="fb_import").click().run()
    assert not at.exception
    assert [shown(s.value) for s in at.success] == ["Imported 1 feedback event from fb.csv"]
