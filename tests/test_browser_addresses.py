"""Every page answers at its own address in a real browser (issue 22: `/prompts` said
"Page not found"), and fetches nothing from outside (issue 37: the favicon came from
fonts.gstatic.com)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tests.test_browser import (  # noqa: F401 (fixtures, marks)
    PAGE_STEP_MS,
    demo_url,
    is_loopback_url,
    outside_requests,
    page,
    pytestmark,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

#: Each page's address and the heading it shows.
ADDRESSES = {
    "prompts": "Prompts",
    "compare": "Compare",
    "runs": "Runs",
    "datasets": "Datasets",
    "experiments": "Experiments",
    "audit": "Audit",
}


def test_every_page_opens_at_its_own_address(
    demo_url: str,  # noqa: F811
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    page.goto(demo_url)  # the server's first session: st.navigation is known from now on
    # Its first page: Compare, the demo run having results.
    expect(page.get_by_role("link", name="Audit")).to_be_visible(timeout=PAGE_STEP_MS)
    for path, heading in ADDRESSES.items():
        page.goto(f"{demo_url}/{path}")  # a new session, straight to the page
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
