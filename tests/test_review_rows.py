"""One row numbering and the run picked (issue 61): a row is numbered from 1 on Runs,
on Review (its table, its card and the rows typed in its send form) and in an export's
`row_number`, beside the `row_index` from 0 that programs use; `/review?run=X` shows X's
items and X's card only, through decisions and a change of run; and Enter submits none
of the page's forms, each of several fields. Driven by AppTest on real DuckDB files."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from streamlit.testing.v1 import AppTest

from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown
from tests.test_first_hour_review import repeated_run, send
from tests.test_page_review import PAGE, TIMEOUT_S, button

RUNS_PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")


def review_page(run_id: str | None = None) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    if run_id is not None:
        at.query_params["run"] = run_id
    at.run()
    assert not at.exception, at.exception
    return at


def review_table(at: AppTest) -> object:
    return next(d.value for d in at.dataframe if d.key == "review_table")


def card(at: AppTest) -> str | None:
    """The heading of the item on show (`Item ID: run `RUN`, row N`), if one is."""
    return next((h.value for h in at.subheader if h.value.startswith("Item ")), None)


def test_the_same_item_has_one_number_on_runs_on_review_and_in_an_export() -> None:
    wb = get_workbench()
    run_id = repeated_run(wb, rows=5, repeats=1)
    # Typed as a person reads Runs: row 3 is the dataset's third row, row_index 2.
    at = send(review_page(), run_id, "3")
    assert not at.exception and not at.error
    (item,) = wb.review.list("open", run_id)
    assert item.row_index == 2
    key = next(r.key for r in wb.runs.items(run_id, limit=100).rows if r.row_index == 2)

    table = review_table(at)
    assert list(table["row"]) == [3]  # type: ignore[index]
    assert card(at) == f"Item {item.id}: run `{run_id}`, row 3"

    runs = AppTest.from_file(RUNS_PAGE, default_timeout=TIMEOUT_S)
    runs.query_params["run"] = run_id
    runs.run()
    assert not runs.exception, runs.exception
    items = next(d.value for d in runs.dataframe if (d.key or "").startswith("items_table_"))
    assert list(items.loc[items["key"] == key, "row"]) == [3]

    exported = wb.exports.table_bytes("items", "csv", run_id=run_id).decode()
    (row,) = [r for r in csv.DictReader(io.StringIO(exported)) if r["key"] == key]
    assert (row["row_number"], row["row_index"]) == ("3", "2")
    header = next(csv.reader(io.StringIO(exported)))
    assert header[header.index("row_index") + 1] == "row_number"  # side by side


def test_rows_1_to_5_are_the_first_five_rows_and_row_0_is_refused() -> None:
    wb = get_workbench()
    run_id = repeated_run(wb, rows=6, repeats=1)
    at = send(review_page(), run_id, "1-5")
    assert not at.exception and not at.error
    assert sorted(i.row_index for i in wb.review.list("open", run_id)) == [0, 1, 2, 3, 4]
    assert sorted(review_table(at)["row"]) == [1, 2, 3, 4, 5]  # type: ignore[index]
    send(at, run_id, "0-1")
    assert [shown(e.value) for e in at.error] == [
        "rows: '0-1' names row 0; rows are numbered from 1"
    ]
    assert len(wb.review.list("open", run_id)) == 5


def test_review_of_a_run_shows_that_run_s_items_and_cards_only() -> None:
    wb = get_workbench()
    mine = repeated_run(wb, rows=2, repeats=1)
    other = repeated_run(wb, rows=2, repeats=1)
    # Interleaved: the other run's items come first and between this run's.
    (other_first,) = wb.review.add(other, [0])
    (first,) = wb.review.add(mine, [0])
    wb.review.add(other, [1])
    (second,) = wb.review.add(mine, [1])

    at = review_page(mine)
    assert set(review_table(at)["run"]) == {mine}  # type: ignore[index]
    assert card(at) == f"Item {first}: run `{mine}`, row 1"
    button(at, "Accept proposed").click().run()  # type: ignore[attr-defined]
    assert not at.exception, at.exception
    assert card(at) == f"Item {second}: run `{mine}`, row 2"  # the next of this run
    button(at, "Reject").click().run()  # type: ignore[attr-defined]
    assert not at.exception, at.exception
    assert card(at) is None  # this run has no open item left; the other's stay away
    assert wb.review.show(other_first).item.status == "open"

    # Another run picked: its card, not the one shown before.
    next(s for s in at.selectbox if s.label == "Run").set_value(other).run()
    assert card(at) == f"Item {other_first}: run `{other}`, row 1"
    # A link naming an item of another run, with a run: that run's card only.
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = mine
    at.query_params["item"] = str(other_first)
    at.run()
    assert not at.exception, at.exception
    assert card(at) is None


def test_no_form_of_the_review_page_submits_on_enter() -> None:
    wb = get_workbench()
    run_id = repeated_run(wb, rows=1, repeats=1)
    (item_id,) = wb.review.add(run_id, [0])
    at = review_page()
    assert card(at) is not None
    forms = {form.key: form.proto.form.enter_to_submit for form in at.form}
    assert set(forms) == {"review_send", f"review_form_{item_id}"}
    assert not any(forms.values()), forms
