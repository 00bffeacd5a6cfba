"""Sign-in for a served team: Streamlit's OpenID Connect login, when its secrets say so.

With an `[auth]` section in the app's secrets (`.streamlit/secrets.toml`, or the file
`--secrets.files` names: redirect_uri, cookie_secret, client_id, client_secret,
server_metadata_url), every page wants a signed-in person, and that person is the actor
of every change the session makes (promptlab.audit.actor). Without the section the app
is open, as on a laptop, and changes are PROMPTLAB_AUTHOR's.

So the app without sign-in is served on loopback only: `make run` and
`.streamlit/config.toml` bind 127.0.0.1. Served on another address (or on every
interface: an empty `server.address`) with no `[auth]` section, anyone who reaches the
port could read and change everything as the app's owner, so the app refuses: each
visitor sees one line and nothing is opened, unless PROMPTLAB_ALLOW_OPEN=1 says the
network in front of it is trusted (a VPN, a proxy that signs people in).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import streamlit as st
from streamlit.errors import StreamlitSecretNotFoundError

from promptlab.engine.spec.endpoints import is_loopback
from promptlab.ui.widgets import escape_markdown

#: The identity claims tried in turn for the actor's name (OIDC standard claims).
ACTOR_CLAIMS = ("email", "preferred_username", "name", "sub")
#: The explicit flag that serves the app off loopback without sign-in.
ALLOW_OPEN = "PROMPTLAB_ALLOW_OPEN"
_YES = frozenset({"1", "true", "yes", "on"})

log = logging.getLogger(__name__)
_refusal_logged = threading.Event()


def sign_in_required() -> bool:
    """Whether the app's secrets configure an OpenID Connect provider. A secrets file
    that does not parse stops the app (it may hold the `[auth]` section): it never
    opens the app to everyone."""
    try:
        return "auth" in st.secrets
    except StreamlitSecretNotFoundError as exc:
        if getattr(exc, "error_id", None) == "no-secrets-found":
            return False
        st.error(f"The app's secrets cannot be read, so nobody can sign in: {exc}")
        st.stop()
        raise  # st.stop() raises; this line is for the type checker


def signed_in_actor() -> str | None:
    """The signed-in person's name for the audit trail, or None when sign-in is off.

    When sign-in is on and nobody is signed in, shows the sign-in screen and stops the
    run: no page, and nothing of the database, is shown before.
    """
    if not sign_in_required():
        return None
    if not st.user.is_logged_in:
        # The only page until then, at every address (the app's pages stay unknown).
        screen = st.Page(_sign_in_screen, title="Sign in", icon=":material/login:")
        st.navigation([screen], position="hidden").run()
        st.stop()
    return actor_from_claims(st.user.to_dict())


def show_signed_in(actor: str | None) -> None:
    """Who is signed in, and the way out (in the sidebar, under the pages)."""
    if actor is None:
        return
    st.caption(f"Signed in as {escape_markdown(actor)}")
    if st.button("Sign out", icon=":material/logout:"):
        st.logout()


def _sign_in_screen() -> None:
    st.title("promptlab")
    st.write("This workbench is shared by a team: sign in to continue.")
    if st.button("Sign in", icon=":material/login:", type="primary"):
        st.login()


def actor_from_claims(claims: dict[str, Any]) -> str:
    """The first of ACTOR_CLAIMS the identity token carries (`sub` always is)."""
    for claim in ACTOR_CLAIMS:
        if claim == "email" and claims.get("email_verified") is False:
            continue  # a provider that says the address is not verified
        value = claims.get(claim)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return "signed-in user"


def served_address() -> str:
    """The address the app's server binds (`server.address`; empty: every interface)."""
    return str(st.get_option("server.address") or "").strip()


def is_local(address: str) -> bool:
    """Whether only this machine can connect: a loopback IP or `localhost`."""
    return bool(address) and is_loopback(address.strip("[]"))


def open_serving_allowed() -> bool:
    return os.environ.get(ALLOW_OPEN, "").strip().lower() in _YES


def refusal(address: str, *, signs_in: bool, allowed: bool) -> str | None:
    """Why the app will not serve pages at `address`, or None when it may."""
    if is_local(address) or signs_in or allowed:
        return None
    where = f"on {address}" if address else "on every network interface"
    return (
        f"Not serving {where} without sign-in: configure sign-in (an [auth] section in "
        f"the app's secrets), bind 127.0.0.1 (make run), or set {ALLOW_OPEN}=1 if the "
        "network in front of this app is trusted."
    )


def refuse_open_serving() -> None:
    """Stop the run, showing one line, when the app is served off loopback to anyone:
    nothing of the database is opened or shown."""
    address = served_address()
    if is_local(address):
        return
    reason = refusal(address, signs_in=sign_in_required(), allowed=open_serving_allowed())
    if reason is None:
        return
    if not _refusal_logged.is_set():  # once in the server's log, for whoever started it
        _refusal_logged.set()
        log.error("%s", reason)
    st.error(reason, icon=":material/block:")
    st.stop()
