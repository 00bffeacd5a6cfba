"""Every page answers at its own address in a real browser (issue 22: `/prompts` said
"Page not found"), and fetches nothing from outside (issue 37: the favicon came from
fonts.gstatic.com). Every page, and Compare in each of its modes, survives a reload
with what it showed and without an error (issue 61: a reload of Compare's Two versions
lost the mode and logged a Streamlit stack trace)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.test_browser import (  # noqa: F401 (fixtures, marks)
    PAGE_STEP_MS,
    is_loopback_url,
    outside_requests,
    page,
    pytestmark,
    started_app,
)
from tests.test_page_compare import write_log

if TYPE_CHECKING:
    from playwright.sync_api import Page

#: Each page's address and the heading it shows.
ADDRESSES = {
    "prompts": "Prompts",
    "compare": "Compare",
    "runs": "Runs",
    "datasets": "Datasets",
    "experiments": "Experiments",
    "review": "Review",
    "audit": "Audit",
}
#: What the app process writes for an exception: a traceback, an uncaught error, or a
#: warning logged with its stack (Streamlit's "value set via the Session State API").
TRACES = ("Traceback", "Uncaught", "Stack (most recent call last)")


@pytest.fixture
def logged_demo_url(demo_db: Path, tmp_path: Path) -> Iterator[str]:
    """The app over a copy of the demo database with a production log of the demo run's
    two versions imported: every Compare mode has something to compare."""
    from promptlab.config import Settings
    from promptlab.workbench import Workbench

    db = tmp_path / "app.duckdb"
    shutil.copyfile(demo_db, db)
    settings = Settings.from_env({"PROMPTLAB_DB": str(db), "PROMPTLAB_AUTHOR": "e2e"})
    with Workbench.open(settings) as wb:
        a, b = (r.label for r in wb.analysis.metrics())
        write_log(tmp_path / "prod.csv", a, b)
        wb.analysis.import_logs(tmp_path / "prod.csv")
    with started_app(tmp_path) as url:
        yield url


def assert_no_error(window: Page, log: Path) -> None:
    """Neither the page in `window` nor the app process showed an exception so far."""
    from playwright.sync_api import expect

    expect(window.get_by_test_id("stException")).to_have_count(0)
    written = log.read_text()
    assert not [t for t in TRACES if t in written], written


def test_every_page_opens_at_its_own_address(
    logged_demo_url: str,
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    log = tmp_path / "streamlit.log"
    page.goto(logged_demo_url)  # the server's first session: st.navigation is known from now on
    # Its first page: Compare, the demo run having results.
    expect(page.get_by_role("link", name="Audit")).to_be_visible(timeout=PAGE_STEP_MS)
    for path, heading in ADDRESSES.items():
        page.goto(f"{logged_demo_url}/{path}")  # a new session, straight to the page
        expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=PAGE_STEP_MS)
        assert page.url.split("?")[0].endswith(f"/{path}")
        expect(page.get_by_text("Page not found")).to_have_count(0)
        # The page's favicon and every resource it loaded came from the app itself.
        icons = page.eval_on_selector_all("link[rel~='icon']", "links => links.map(l => l.href)")
        loaded = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        assert icons and all(is_loopback_url(url) for url in icons), icons
        assert [url for url in loaded if not is_loopback_url(url)] == []
        assert outside_requests(page) == []
        page.screenshot(path=str(tmp_path / f"address-{path}.png"), full_page=True)
        shown = settled_address(page)
        page.reload()  # a new session at the address the page wrote
        expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=PAGE_STEP_MS)
        assert settled_address(page) == shown
        assert_no_error(page, log)
    reload_compare_in_every_mode(page, logged_demo_url, log)


def settled_address(window: Page) -> str:
    """The address once the page's script run is over: a page writes its choices there
    during its run (Runs adds `?run=` once it has picked one), so one read mid-run can be
    an address the page is about to replace."""
    window.wait_for_function(
        "document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'",
        timeout=PAGE_STEP_MS,
    )
    return window.url


def reload_compare_in_every_mode(window: Page, url: str, log: Path) -> None:
    """Compare's mode and choices, picked as a person picks them, are in its address and
    survive a reload (a new session), with no exception logged or shown."""
    from playwright.sync_api import expect

    window.goto(f"{url}/compare")
    run = window.get_by_role("combobox", name="Run")
    expect(run).to_be_visible(timeout=PAGE_STEP_MS)
    versions = window.get_by_role("combobox", name="Version B")
    for mode, name in (("Two versions", "versions"), ("Production logs", "logs")):
        window.get_by_role("radio", name=mode).click()
        expect(versions).to_be_visible(timeout=PAGE_STEP_MS)
        expect(window).to_have_url(re.compile(rf"mode={name}&a=.+&b="), timeout=PAGE_STEP_MS)
        # Logs start as still collecting, versions as finished: pick the other one.
        other, method = (
            ("Finished", "fixed horizon")
            if name == "logs"
            else ("Still collecting", "always valid")
        )
        window.get_by_role("radio", name=other).click()
        expect(window).to_have_url(re.compile("data="), timeout=PAGE_STEP_MS)
        # Drawn anew (no tab of the view before it left on the page): the tabs settled.
        expect(window.get_by_text(re.compile(f"^Method: {method}"))).to_be_visible(
            timeout=PAGE_STEP_MS
        )
        if name == "versions":  # its open tab too (a run's is below)
            expect(window.get_by_role("tab")).to_have_count(2, timeout=PAGE_STEP_MS)
            window.get_by_role("tab", name="Charts").click()
            expect(window).to_have_url(re.compile("tab=Charts"), timeout=PAGE_STEP_MS)
        shown = window.url
        window.reload()
        expect(versions).to_be_visible(timeout=PAGE_STEP_MS)
        for picked in (mode, other):
            expect(window.get_by_role("radio", name=picked)).to_have_attribute(
                "aria-checked", "true"
            )
        opened = "Charts" if name == "versions" else "Answer"
        expect(window.get_by_role("tab", name=opened)).to_have_attribute("aria-selected", "true")
        assert window.url == shown
        assert_no_error(window, log)
    window.get_by_role("radio", name="A run's variants").click()
    expect(run).to_be_visible(timeout=PAGE_STEP_MS)
    # The run, then what its tabs keep (`&mde=` once the change to detect is set).
    expect(window).to_have_url(re.compile(r"/compare\?run=run_\w+(&|$)"), timeout=PAGE_STEP_MS)
    expect(window.get_by_role("tab")).to_have_count(3, timeout=PAGE_STEP_MS)
    window.get_by_role("tab", name="Outputs").click()
    expect(window).to_have_url(re.compile("tab=Outputs"), timeout=PAGE_STEP_MS)
    shown, picked = window.url, run.input_value()
    window.reload()
    expect(window.get_by_role("tab", name="Outputs")).to_have_attribute(
        "aria-selected", "true", timeout=PAGE_STEP_MS
    )
    expect(run).to_have_value(picked)
    assert window.url == shown
    assert_no_error(window, log)


#: Emoji and the symbols browsers draw from emoji fonts (tests/test_no_emoji.py).
EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe0f]")


def test_what_users_see_is_what_is_true(
    logged_demo_url: str,
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Issue 61 in one journey: a change waits for a confirmation naming it; Runs'
    download says what its file holds under a filter; Review numbers rows from 1 (that
    no form submits on Enter is tests/test_review_rows.py's); on
    production logs Decide now takes the final look once and it stands after a reload;
    nothing the pages draw needs an emoji font."""
    from playwright.sync_api import expect

    log = tmp_path / "streamlit.log"
    url = logged_demo_url
    page.goto(f"{url}/experiments")
    weight = page.get_by_label("control weight")
    expect(weight).to_be_visible(timeout=PAGE_STEP_MS)
    weight.fill("50")
    weight.press("Tab")
    page.get_by_role("button", name="Save as new revision").click()
    question = page.get_by_text("Save revision 2 of triage-split: weight control 70 → 50?")
    expect(question).to_be_visible(timeout=PAGE_STEP_MS)
    page.get_by_role("button", name="Keep it as it is").click()
    expect(question).to_have_count(0, timeout=PAGE_STEP_MS)
    expect(page.get_by_text("Save revision 2")).to_have_count(0)

    page.goto(f"{url}/runs")
    variant = page.get_by_role("combobox", name="Variant")
    expect(variant).to_be_visible(timeout=PAGE_STEP_MS)
    # The live panel redraws every few seconds and may close the list: pick again until
    # the choice is taken.
    for _ in range(5):
        variant.click()
        variant.fill("staging")
        variant.press("Enter")
        if variant.input_value() == "staging":
            break
    expect(variant).to_have_value("staging")
    expect(page.get_by_text(re.compile(r"^\d+ items: variant staging$"))).to_be_visible(
        timeout=PAGE_STEP_MS
    )
    expect(page.get_by_text(re.compile(r"^\d+ items: whole run$"))).to_be_visible()

    page.goto(f"{url}/review")
    page.get_by_text("Send rows to review").click()
    rows = page.get_by_role("textbox", name="Rows")
    expect(rows).to_be_visible(timeout=PAGE_STEP_MS)
    card = page.get_by_role("heading", name=re.compile(r"^Item \d+: run run_\w+, row 1$"))
    expect(card).to_have_count(0)
    # Tab commits the typed rows before the click: on a busy machine a click right after
    # typing once sent nothing (the list stayed empty), so send again until one arrives.
    for _ in range(3):
        if not rows.is_visible():
            page.get_by_text("Send rows to review").click()
        rows.fill("1-2")
        rows.press("Tab")
        page.get_by_role("button", name="Send these rows").click()
        try:
            expect(card).to_be_visible(timeout=30_000)
            break
        except AssertionError:
            continue
    expect(card).to_be_visible()  # the first row sent: row 1

    page.goto(f"{url}/compare?mode=logs&planned=100")
    decide = page.get_by_role("button", name="Decide now")
    expect(decide).to_be_visible(timeout=PAGE_STEP_MS)
    decide.click()
    page.get_by_role("button", name="Yes, decide now").click()
    decided = page.get_by_text(re.compile("^Decided: .+ at 120 and 120 units"))
    expect(decided).to_be_visible(timeout=PAGE_STEP_MS)
    page.reload()
    expect(decided).to_be_visible(timeout=PAGE_STEP_MS)
    expect(page.get_by_role("button", name="Decide now")).to_have_count(0)
    assert not EMOJI.findall(page.inner_text("body"))
    assert_no_error(page, log)
