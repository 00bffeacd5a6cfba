"""Issues 43 and 22: links land on what they name, in a real browser. Runs → Audit →
Runs → Compare, following each page's own link, with the run named NOT the newest
(where the pages once opened the newest run and rewrote the address), then the review
queue of that run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.test_browser import (  # noqa: F401 (fixtures, marks)
    PAGE_STEP_MS,
    after_a_redraw,
    app_url,
    page,
    pytestmark,
    run_with_items,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.fixture
def older_run(run_with_items: tuple[str, str], tmp_path: Path) -> tuple[str, str]:  # noqa: F811
    """`run_with_items`'s run and item, with a newer run after it in the same database."""
    from promptlab.config import Settings
    from promptlab.engine import parse_spec
    from promptlab.workbench import Workbench

    spec = parse_spec(
        {
            "name": "newer",
            "dataset": str(tmp_path / "rows.csv"),
            "variants": [
                {
                    "messages": [{"role": "user", "content": "Reply to {{ text }}"}],
                    "model": "sim:fast",
                }
            ],
        }
    )
    with Workbench.open(Settings.from_env().with_db(tmp_path / "app.duckdb")) as wb:
        newer = wb.runs.start(spec)
        assert wb.runs.wait(newer, timeout=60).status == "completed"
        assert wb.runs.list()[0].run.run_id == newer  # the named run is not the newest
    return run_with_items


def test_an_item_s_links_land_on_the_named_run_and_item_and_it_is_reviewed(
    older_run: tuple[str, str],
    app_url: str,  # noqa: F811
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Runs (a deep link by an item's key prefix) -> the item's audit trace -> back to the
    item in Runs -> Compare, for a run that is not the newest; then its review queue.
    One journey: each step is a link of the page before it."""
    from playwright.sync_api import expect

    run_id, key = older_run
    # Every message the server pushes to each new tab: the live panel's redraws among them.
    pushed: list[int] = []
    page.context.on(
        "page",
        lambda tab: tab.on(
            "websocket", lambda ws: ws.on("framereceived", lambda _frame: pushed.append(1))
        ),
    )
    # The first request of this server process: the query survives the trip via app.py.
    page.goto(f"{app_url}/runs?run={run_id}&item={key[:10]}")
    # The item's own line, not its key alone: the items table's grid also writes each
    # cell's text into the page (for screen readers) once it has drawn that row.
    item_line = re.compile(rf"^Item {key} · succeeded$")
    expect(page.get_by_text(item_line)).to_be_visible(timeout=PAGE_STEP_MS)
    expect(page.get_by_text("Say second row")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(page.get_by_text("Attempts (1)")).to_be_visible(timeout=PAGE_STEP_MS)
    assert f"run={run_id}" in page.url and "item=" in page.url
    page.screenshot(path=str(tmp_path / "05-item.png"), full_page=True)

    # One click from the result to its full trace (Markdown links open a new tab).
    with page.context.expect_page() as opened:
        page.get_by_role("link", name="Open its audit trace").click()
    audit = opened.value
    expect(audit.get_by_role("heading", name="Audit")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(audit.get_by_text(re.compile(r"^All \d+ chains verified"))).to_be_visible(
        timeout=PAGE_STEP_MS
    )
    expect(audit.get_by_text(key, exact=True).first).to_be_visible(timeout=PAGE_STEP_MS)
    timeline = audit.locator(".js-plotly-plot")
    expect(timeline).to_have_count(1, timeout=PAGE_STEP_MS)
    expect(timeline.locator("svg.main-svg").first).to_be_visible(timeout=PAGE_STEP_MS)
    assert f"trace={key}" in audit.url
    audit.screenshot(path=str(tmp_path / "05b-trace.png"), full_page=True)

    # From the trace back to the item in Runs: the named run, not the newest.
    link = audit.get_by_role("link", name="Open the item in Runs")
    with audit.context.expect_page() as opened:
        link.click()
    runs = opened.value
    expect(runs.get_by_role("heading", name="Runs")).to_be_visible(timeout=PAGE_STEP_MS)
    run_box = runs.get_by_role("combobox", name="Run")
    expect(run_box).to_have_value(re.compile(rf"· {run_id}$"), timeout=PAGE_STEP_MS)
    item = runs.get_by_text(item_line)
    expect(item).to_be_visible(timeout=PAGE_STEP_MS)
    after_a_redraw(runs, pushed)  # the live panel polled: still the same run and item
    expect(run_box).to_have_value(re.compile(rf"· {run_id}$"))
    expect(item).to_be_visible()
    assert f"run={run_id}" in runs.url and f"item={key}" in runs.url
    runs.screenshot(path=str(tmp_path / "links-runs.png"), full_page=True)
    with runs.context.expect_page() as opened:
        runs.get_by_role("link", name="Compare its variants").click()
    compare = opened.value
    expect(compare.get_by_role("heading", name="Compare")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(compare.get_by_role("combobox", name="Run")).to_have_value(
        re.compile(rf"· {run_id} ·"), timeout=PAGE_STEP_MS
    )
    assert f"run={run_id}" in compare.url
    compare.screenshot(path=str(tmp_path / "links-compare.png"), full_page=True)

    # The review queue: type the right answer and click Correct (Enter in a field sends
    # nothing: the form has two fields); the next comes up; press A to accept the next.
    page.get_by_role("link", name="Review").click()
    expect(page.get_by_role("heading", name="Review")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(page.get_by_text("Item 1: run")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(page.get_by_text("sent by hand (tester): check the wording")).to_be_visible(
        timeout=PAGE_STEP_MS
    )
    answer = page.get_by_role("textbox", name="Answer")
    answer.fill("first row, said")
    page.get_by_role("button", name="Correct").click()
    expect(page.get_by_text("Item 2: run")).to_be_visible(timeout=PAGE_STEP_MS)
    page.get_by_role("heading", name="Review").click()  # focus out of the text boxes
    page.keyboard.press("a")
    expect(page.get_by_text("accepted 1")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(page.get_by_text("corrected 1")).to_be_visible(timeout=PAGE_STEP_MS)
    page.screenshot(path=str(tmp_path / "05c-review.png"), full_page=True)
