"""The Review page as a new user meets it (issue 43): its counts follow each send and
decision in the same redraw, rows go in as numbers and ranges, the run is picked from a
list (or named by `?run=`), and a row sent several times is one card with a tab per
repeat, its JSON laid out a field a line. The row-number parser is tested here too."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.data.row_numbers import MAX_ROWS, parse_rows
from promptlab.errors import ReviewError
from promptlab.prompts.files import load_prompt_file
from promptlab.ui.resources import get_workbench
from promptlab.workbench import Workbench
from tests.test_page_review import PAGE, TIMEOUT_S, button
from tests.test_review import crosschecked_run

ROOT = Path(__file__).resolve().parent.parent


def repeated_run(wb: Workbench, rows: int = 2, repeats: int = 3) -> str:
    """The demo's triage prompt (JSON answers) sending each row `repeats` times."""
    wb.prompts.import_file(load_prompt_file(ROOT / "data" / "demo" / "ticket-triage.yaml"))
    spec = wb.runs.spec_from_data(
        {
            "name": "triage repeats",
            "dataset": str(ROOT / "data" / "demo" / "tickets.csv"),
            "limit_rows": rows,
            "repeats": repeats,
            "variants": [{"prompt": "ticket-triage@production"}],
        }
    )
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


def send(at: AppTest, run_id: str, rows: str) -> AppTest:
    """Fill the send form (a run picked from the list, or typed on the old page) and send."""
    picker = [s for s in at.selectbox if s.label == "From run"]
    if picker:
        picker[0].set_value(run_id)
    else:
        next(t for t in at.text_input if t.label == "Run id").set_value(run_id)
    next(t for t in at.text_input if t.label == "Rows").set_value(rows)
    return button(at, "Send these rows").click().run()  # type: ignore[attr-defined]


def plain(markdown: str) -> str:
    """An error box's text without the escapes that keep it from being Markdown."""
    return markdown.replace("\\", "")


def counts_line(at: AppTest) -> str:
    return next(c.value for c in at.caption if c.value.startswith("open **"))


def test_the_counts_follow_a_send_and_a_decision_in_the_same_redraw() -> None:
    wb = get_workbench()
    run_id = crosschecked_run(wb, rows=4)
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    before = len(wb.review.list("open", run_id))
    assert counts_line(at).startswith(f"open **{before}**")
    send(at, run_id, "1, 2, 3, 4")
    assert not at.exception and not at.error
    sent = 4 - before
    assert [t.value for t in at.toast] == [f"Sent {sent} row(s) to review"]
    assert counts_line(at).startswith("open **4**")  # not the count before the send
    button(at, "Accept proposed").click().run()  # type: ignore[attr-defined]
    assert counts_line(at).startswith("open **3**") and "accepted **1**" in counts_line(at)
    assert not at.toast  # said once, not again on the next redraw


def test_rows_go_in_as_ranges_and_a_bad_part_is_named() -> None:
    wb = get_workbench()
    run_id = repeated_run(wb, rows=6, repeats=1)
    at = send(AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run(), run_id, "1-3, 5")
    assert not at.exception and not at.error
    # Rows are numbered from 1, as on Runs: rows 1-3 and 5 are row_index 0-2 and 4.
    assert sorted(i.row_index for i in wb.review.list("open", run_id)) == [0, 1, 2, 4]
    send(at, run_id, "5-3")
    assert [plain(e.value) for e in at.error] == ["rows: '5-3' is not a range (5 > 3)"]
    send(at, run_id, "1-5000")
    assert any("at most 1,000 rows" in e.value for e in at.error)
    assert len(wb.review.list("open", run_id)) == 4


def test_the_run_is_picked_from_a_list_and_the_address_names_it() -> None:
    wb = get_workbench()
    older = repeated_run(wb, rows=2, repeats=1)
    newer = crosschecked_run(wb, rows=4)
    wb.review.add(older, [0, 1])
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    picker = next(s for s in at.selectbox if s.label == "Run")
    assert picker.options[:3] == [
        "any run",
        f"triage cross-check · {newer} · 12 results",
        f"triage repeats · {older} · 2 results",
    ]  # newest first; three models answered each of the 4 rows
    assert picker.value == ""  # any run until one is picked
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = older
    at.run()
    assert not at.exception
    assert next(s for s in at.selectbox if s.label == "Run").value == older
    table = next(d.value for d in at.dataframe if d.key == "review_table")
    assert set(table["run"]) == {older}
    next(s for s in at.selectbox if s.label == "Run").set_value(newer).run()
    table = next(d.value for d in at.dataframe if d.key == "review_table")
    assert set(table["run"]) == {newer}
    assert at.query_params["run"] in ([newer], newer)  # the address follows the pick


def test_a_rows_repeats_are_one_card_with_a_tab_each_and_json_on_lines() -> None:
    wb = get_workbench()
    run_id = repeated_run(wb, rows=1, repeats=3)
    wb.review.add(run_id, [0])
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    assert [t.label for t in at.tabs] == ["Repeat 1", "Repeat 2", "Repeat 3"]
    answers = [c for c in at.code if c.language == "json"]
    assert len(answers) == 3  # one per tab, each a whole card's width
    assert all(c.value.startswith('{\n  "category"') for c in answers)


@pytest.mark.parametrize(
    ("text", "rows"),
    [
        ("1-5", [1, 2, 3, 4, 5]),
        ("1,3,7-9", [1, 3, 7, 8, 9]),
        ("3, 7, 12", [3, 7, 12]),
        ("3 7 12", [3, 7, 12]),
        ("1 - 3, 3", [1, 2, 3]),
        ("4\u20136", [4, 5, 6]),
        ("9, 1-2, 1", [9, 1, 2]),
        ("5-5", [5]),
    ],
)
def test_row_numbers_read_numbers_and_ranges(text: str, rows: list[int]) -> None:
    assert parse_rows(text) == rows


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("5-1", "rows: '5-1' is not a range (5 > 1)"),
        ("1, three", "rows: 'three' is not a row number or a range (e.g. 1-5 or 1,3,7-9)"),
        ("-3", "rows: '-3' is not a row number"),
        ("1-2-3", "rows: '1-2-3' is not a row number"),
        ("1.5", "rows: '1.5' is not a row number"),
        (" , ", "rows: give row numbers, e.g. 1-5 or 1,3,7-9"),
        ("1-99999999999", "rows: at most 10,000 rows at a time; '1-99999999999' goes past it"),
        ("1-10000, 1", "rows: at most 10,000 rows at a time; '1' goes past it"),
        ("0", "rows: '0' names row 0; rows are numbered from 1"),
        ("0-5", "rows: '0-5' names row 0; rows are numbered from 1"),
        ("1" * 13, f"rows: '{'1' * 13}' is not a row number"),
        ("1," * 6_000, "rows: at most 10,000 characters, got 12,000"),
    ],
)
def test_row_numbers_name_the_bad_part(text: str, error: str) -> None:
    with pytest.raises(ReviewError) as raised:
        parse_rows(text)
    assert str(raised.value).startswith(error)


def test_row_numbers_are_bounded_by_the_limit_given() -> None:
    assert len(parse_rows(f"1-{MAX_ROWS}")) == MAX_ROWS
    assert parse_rows("1-3", limit=3) == [1, 2, 3]
    with pytest.raises(ReviewError, match="at most 3 rows at a time; '4' goes past it"):
        parse_rows("1-3, 4", limit=3)


def test_row_numbers_from_1_are_row_indexes_from_0() -> None:
    from promptlab.data.row_numbers import row_indexes

    assert row_indexes("1-5") == [0, 1, 2, 3, 4]
    assert row_indexes("7, 2") == [6, 1]
