"""Issue 43: links land on what they name, in a real browser. Audit → Runs → Compare,
following each page's own link, with the run named NOT the newest (where the pages once
opened the newest run and rewrote the address)."""

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
        {"name": "newer", "dataset": str(tmp_path / "rows.csv"), "variants": [
            {"messages": [{"role": "user", "content": "Reply to {{ text }}"}],
             "model": "sim:fast"}]}
    )  # fmt: skip
    with Workbench.open(Settings.from_env().with_db(tmp_path / "app.duckdb")) as wb:
        newer = wb.runs.start(spec)
        assert wb.runs.wait(newer, timeout=60).status == "completed"
        assert wb.runs.list()[0].run.run_id == newer  # the named run is not the newest
    return run_with_items


def test_audit_to_runs_to_compare_lands_on_the_named_run_and_item(
    older_run: tuple[str, str],
    app_url: str,  # noqa: F811
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
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
    page.goto(f"{app_url}/audit?trace={key}")  # the server's first request
    link = page.get_by_role("link", name="Open the item in Runs")
    expect(link).to_be_visible(timeout=PAGE_STEP_MS)
    with page.context.expect_page() as opened:  # Markdown links open a new tab
        link.click()
    runs = opened.value
    expect(runs.get_by_role("heading", name="Runs")).to_be_visible(timeout=PAGE_STEP_MS)
    run_box = runs.get_by_role("combobox", name="Run")
    expect(run_box).to_have_value(re.compile(rf"· {run_id}$"), timeout=PAGE_STEP_MS)
    item = runs.get_by_text(re.compile(rf"^Item {key} · succeeded$"))
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
