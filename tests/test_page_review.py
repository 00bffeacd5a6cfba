"""The Review page, driven by AppTest over a cross-checked run on the simulated models:
the queue, the models' answers side by side, correct / accept / reject moving on to the
next open item, rows sent by hand, a refusal shown in one line, and the settled answers
as a download."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from promptlab.ui.resources import get_workbench
from tests.test_review import MODELS, crosschecked_run

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "review.py")
TIMEOUT_S = 30


def button(at: AppTest, label: str) -> object:
    return next(b for b in at.button if b.label == label)


def answer_box(at: AppTest) -> object:
    return next(t for t in at.text_input if t.label == "Answer")


def test_an_empty_queue_says_where_items_come_from() -> None:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    assert any("Cross-checked runs send" in i.value for i in at.info)


def test_a_reviewer_corrects_accepts_and_rejects_in_turn() -> None:
    wb = get_workbench()
    run_id = crosschecked_run(wb, rows=8)
    opened = wb.review.list("open", run_id)
    assert len(opened) >= 3
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if d.key == "review_table")
    assert list(table["id"]) == [i.id for i in opened]
    # The first open item is on show, every model's answer in a column of its own.
    assert at.subheader[0].value.startswith(f"Item {opened[0].id}: run `{run_id}`")
    assert [m for m in MODELS if any(m in md.value for md in at.markdown)] == MODELS
    assert any(c.value.startswith("cross-check: review") for c in at.caption)
    assert any(e.label.startswith(f"Cross-check of run {run_id}") for e in at.expander)

    answer_box(at).set_value("account")  # type: ignore[attr-defined]
    button(at, "Correct").click()  # type: ignore[attr-defined]
    at.run()
    assert not at.exception
    first = wb.review.show(opened[0].id).item
    assert (first.status, first.answer) == ("corrected", "account")
    assert at.subheader[0].value.startswith(f"Item {opened[1].id}:")  # the next one

    button(at, "Accept proposed").click().run()  # type: ignore[attr-defined]
    assert wb.review.show(opened[1].id).item.status == "accepted"
    button(at, "Reject").click().run()  # type: ignore[attr-defined]
    assert wb.review.show(opened[2].id).item.status == "rejected"
    assert not at.exception

    # A corrected answer that is empty is refused on the page, in one line.
    answer_box(at).set_value("  ")  # type: ignore[attr-defined]
    button(at, "Correct").click().run()  # type: ignore[attr-defined]
    assert any("the corrected answer is empty" in e.value for e in at.error)
    assert any(b.label.startswith("Settled answers as a dataset (2 rows)") for b in at.button)


def test_rows_are_sent_by_hand_from_the_page() -> None:
    wb = get_workbench()
    run_id = crosschecked_run(wb, rows=4)
    adopted = {r for r in range(4)} - {i.row_index for i in wb.review.list("open", run_id)}
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    next(s for s in at.selectbox if s.label == "From run").set_value(run_id)
    boxes = {t.label: t for t in at.text_input}
    boxes["Rows"].set_value("1, 2, 3, 4")  # numbered from 1: row_index 0 to 3
    button(at, "Send these rows").click().run()  # type: ignore[attr-defined]
    assert not at.exception and not at.error
    queued = {i.row_index: i for i in wb.review.list("open", run_id)}
    assert set(queued) == {0, 1, 2, 3}
    assert {queued[r].source for r in adopted} <= {"hand"}
    boxes = {t.label: t for t in at.text_input}
    boxes["Rows"].set_value("three")
    button(at, "Send these rows").click().run()  # type: ignore[attr-defined]
    assert any("three" in e.value and "is not a row number" in e.value for e in at.error)


def test_a_tiebreak_says_which_rows_it_reinferred() -> None:
    wb = get_workbench()
    run_id = crosschecked_run(
        wb, rows=6, models=MODELS[:2], tiebreak={"model": "sim:fast", "weight": 0.5}
    )
    summary = wb.review.crosscheck(run_id)
    assert summary is not None and summary.reinferred > 0
    reinferred = [i for i in wb.review.list("open", run_id) if "re-inferred it" in i.reason]
    assert reinferred, "a split the third model did not settle goes to review, saying so"
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception
    label = f"{summary.reinferred} re-inferred by the tiebreak model"
    assert any(label in e.label for e in at.expander)
    weights = next(d.value for d in at.dataframe if "weight from F1" in d.value.columns)
    third = weights[weights["model"] == "sim:fast (tiebreak)"].iloc[0]
    assert third["weight (±5% rule)"] == 0.5 and third.isna()["weight from F1"]
