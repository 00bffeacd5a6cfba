"""Sign-in for a served team (issue 24, item 3): with an OpenID Connect provider in the
app's secrets, nothing shows before sign-in, and the signed-in person is the actor of
what they change. Against a local mock provider (oidc-provider-mock) on 127.0.0.1."""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.test_browser import PAGE_STEP_MS, free_port, started_app
from tests.test_browser import page as page  # the fixture
from tests.test_browser import pytestmark as pytestmark
from tests.test_browser_addresses import settled_address

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

SIGNED_IN = "ada@example.com"


@pytest.fixture
def oidc_provider() -> Iterator[str]:
    """A mock OpenID Connect provider on a free loopback port; yields its issuer URL.
    It accepts any client, and signs in whoever is typed into its form."""
    import oidc_provider_mock
    import werkzeug.serving

    server = werkzeug.serving.make_server(
        "127.0.0.1", 0, oidc_provider_mock.app(require_nonce=True), threaded=True
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.fixture
def not_the_app(oidc_provider: str) -> list[str]:
    """The mock provider's sign-in page styles itself from a CDN: not the app's page."""
    return [oidc_provider]


def secrets_file(tmp_path: Path, app_url: str, issuer: str) -> Path:
    """The app's `[auth]` secrets for `issuer` (what a team puts in secrets.toml): the
    provider sends a person back to `app_url`, where people reach the app (a proxy's
    address when one stands in front)."""
    path = tmp_path / "secrets.toml"
    path.write_text(
        "[auth]\n"
        f'redirect_uri = "{app_url}/oauth2callback"\n'
        'cookie_secret = "a-cookie-secret-used-by-this-test-only-0123456789"\n'
        'client_id = "promptlab"\n'
        'client_secret = "promptlab-test-secret"\n'
        f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n'
    )
    return path


def sign_in_at(page: Page, sign_in: Locator, issuer: str) -> None:
    """Click Sign in and sign in as SIGNED_IN at the mock provider's form."""
    sign_in.click()
    page.wait_for_url(f"{issuer}/oauth2/authorize**", timeout=PAGE_STEP_MS)
    page.fill("input[name=sub]", SIGNED_IN)
    page.get_by_role("button", name="Authorize").click()


def test_a_team_signs_in_and_what_they_change_is_theirs(
    tmp_path: Path, page: Page, oidc_provider: str, demo_db: Path
) -> None:
    from playwright.sync_api import expect

    from promptlab.config import Settings
    from promptlab.store.audit import AuditFilter
    from promptlab.workbench import Workbench

    shutil.copyfile(demo_db, tmp_path / "app.duckdb")  # the demo's prompts to change
    port = free_port()
    secrets = secrets_file(tmp_path, f"http://127.0.0.1:{port}", oidc_provider)
    with started_app(tmp_path, port=port, args=["--secrets.files", str(secrets)]) as url:
        # A deep link shows the sign-in screen, and nothing of the page it asked for.
        page.goto(f"{url}/prompts")
        sign_in = page.get_by_role("button", name="Sign in")
        expect(sign_in).to_be_visible(timeout=PAGE_STEP_MS)
        expect(page.get_by_role("heading", name="Prompts")).to_have_count(0)
        expect(page.get_by_text("Summarize an article")).to_have_count(0)
        # Once the script run is over: no "Page not found" box over the button (issue 59).
        settled_address(page)
        expect(page.get_by_text("Page not found")).to_have_count(0)
        page.screenshot(path=str(tmp_path / "signin-01-screen.png"), full_page=True)

        sign_in_at(page, sign_in, oidc_provider)

        # (A word joiner after the @ keeps Markdown from reading it as a shorthand.)
        signed_in = re.compile(r"Signed in as ada@\u2060?example\.com")
        expect(page.get_by_text(signed_in)).to_be_visible(timeout=PAGE_STEP_MS)
        # Back from the provider on the first page (Compare, the demo run having results).
        # The sidebar is drawn on `/` too, before it switches to Compare: a click on a
        # link in between lost to that switch once (the journey then waited on Compare).
        expect(page.get_by_role("heading", name="Compare")).to_be_visible(timeout=PAGE_STEP_MS)
        page.get_by_role("link", name="Prompts").click(timeout=PAGE_STEP_MS)
        expect(page.get_by_role("heading", name="Prompts")).to_be_visible(timeout=PAGE_STEP_MS)
        page.get_by_role("tab", name="Edit").click()
        message = page.get_by_label("Message 2 (user)")
        expect(message).to_have_value(re.compile(r"\{\{ article \}\}"), timeout=PAGE_STEP_MS)
        message.fill(message.input_value() + "\nAnswer in English.")
        page.get_by_label("Commit message").fill("Signed-in change")
        page.get_by_role("button", name="Save new version").click()
        expect(page.get_by_text("Saved article-summarizer@2.1.0")).to_be_visible(
            timeout=PAGE_STEP_MS
        )
        page.get_by_role("tab", name="History").click()
        new_row = page.locator("tr[role='row']", has_text="Signed-in change")
        expect(new_row).to_contain_text(SIGNED_IN, timeout=PAGE_STEP_MS)
        page.screenshot(path=str(tmp_path / "signin-02-history.png"), full_page=True)

        # Signing out ends the provider's session too (it asks), then comes back.
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("button", name="End session").click(timeout=PAGE_STEP_MS)
        expect(page.get_by_role("button", name="Sign in")).to_be_visible(timeout=PAGE_STEP_MS)

    # The app is gone: the database shows who made the change (not PROMPTLAB_AUTHOR).
    with Workbench.open(Settings(db_path=tmp_path / "app.duckdb")) as wb:
        created = wb.audit.events(AuditFilter(kind="prompt_version.created"))
        mine = [e for e in created if e.payload.get("ref") == "article-summarizer@2.1.0"]
        assert [e.actor for e in mine] == [SIGNED_IN]
        version = wb.prompts.resolve("article-summarizer@2.1.0")
        assert version.author == SIGNED_IN


def test_secrets_that_do_not_parse_open_nothing(tmp_path: Path, page: Page) -> None:
    """A broken secrets file (it may hold the [auth] section) stops the app with one line;
    it never opens the app to everyone."""
    from playwright.sync_api import expect

    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[auth]\nredirect_uri = "http://127.0.0.1:1/oauth2callback\n')  # no quote
    with started_app(tmp_path, args=["--secrets.files", str(secrets)]) as url:
        page.goto(f"{url}/prompts")
        expect(page.get_by_text("The app's secrets cannot be read")).to_be_visible(
            timeout=PAGE_STEP_MS
        )
        expect(page.get_by_role("heading", name="Prompts")).to_have_count(0)
        expect(page.get_by_text("Summarize an article")).to_have_count(0)
