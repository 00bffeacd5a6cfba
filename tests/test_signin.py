"""The app's sign-in gate (promptlab/ui/signin.py) in AppTest; the whole OpenID Connect
round trip against a mock provider is in tests/test_browser_signin.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.ui.signin import actor_from_claims
from tests.apptest_helpers import shown

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
AUTH = {
    "redirect_uri": "http://127.0.0.1:8501/oauth2callback",
    "cookie_secret": "a-cookie-secret-used-by-this-test-only-0123456789",
    "client_id": "promptlab",
    "client_secret": "promptlab-test-secret",
    "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration",
}


def app(user: dict[str, object] | None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.secrets["auth"] = AUTH
    at.user = user or {"is_logged_in": False}
    return at.run()


@pytest.mark.no_database
def test_with_sign_in_configured_nothing_shows_before_it(db_path: Path) -> None:
    at = app(None)
    assert not at.exception, at.exception
    assert [b.label for b in at.button] == ["Sign in"]
    assert [t.value for t in at.title] == ["promptlab"]  # not a page of the app
    assert not db_path.exists()  # the database is not even opened


def test_a_signed_in_person_sees_the_app_and_the_way_out(db_path: Path) -> None:
    # (That their changes are theirs is checked in the browser: AppTest reruns a page
    # that st.switch_page went to without its entry script, so without the gate.)
    at = app({"is_logged_in": True, "email": "grace@example.com", "sub": "g-1"})
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Prompts"]
    assert "Signed in as grace@example.com" in [shown(c.value) for c in at.sidebar.caption]
    assert "Sign out" in [b.label for b in at.sidebar.button]


def test_without_sign_in_the_process_author_acts(db_path: Path) -> None:
    at = AppTest.from_file(APP, default_timeout=30).run()
    assert not at.exception, at.exception
    assert not any("Signed in" in shown(c.value) for c in at.caption)
    assert "Sign in" not in [b.label for b in at.button]


def test_the_actor_is_the_first_identity_claim_present() -> None:
    assert actor_from_claims({"email": "a@b.c", "name": "A", "sub": "1"}) == "a@b.c"
    assert actor_from_claims({"preferred_username": "ada", "sub": "1"}) == "ada"
    assert actor_from_claims({"email": "  ", "name": "Ada L", "sub": "1"}) == "Ada L"
    assert actor_from_claims({"sub": "1"}) == "1"
    # An address the provider says is not verified does not name anyone.
    assert actor_from_claims({"email": "a@b.c", "email_verified": False, "sub": "1"}) == "1"
    assert actor_from_claims({}) == "signed-in user"
