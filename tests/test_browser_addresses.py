"""Every page answers at its own address in a real browser (issue 22: `/prompts` said
"Page not found")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tests.test_browser import app_url, page, pytestmark  # noqa: F401 (fixtures, marks)

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
    app_url: str,  # noqa: F811
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    page.goto(app_url)  # the server's first session: st.navigation is known from now on
    expect(page.get_by_role("heading", name="Prompts")).to_be_visible(timeout=30_000)
    for path, heading in ADDRESSES.items():
        page.goto(f"{app_url}/{path}")  # a new session, straight to the page
        expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=30_000)
        assert page.url.split("?")[0].endswith(f"/{path}")
        expect(page.get_by_text("Page not found")).to_have_count(0)
        page.screenshot(path=str(tmp_path / f"address-{path}.png"), full_page=True)
