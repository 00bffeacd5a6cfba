"""Webhooks: a guarded rollout's decisions posted as JSON to the address its experiment
names (`rollout.on_decision_url`), for a team's chat or pager.

An experiment file is somebody's text, and the server must not post to wherever it
says: an address is used only when its host is one the server's operator listed in
PROMPTLAB_WEBHOOK_HOSTS (exact host names, comma-separated; none by default). Nothing
is resolved or connected before that check. A post carries the decision only (the
experiment, the action, the reason and the guardrails' lines: no key, no prompt, no
output), goes once on a thread of its own with a 5 s timeout and no redirect followed,
and a failure is logged, never retried: the audit trail holds every decision anyway.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Mapping
from typing import Any

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
MAX_URL_CHARS = 2_000


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a webhook's address whatever the hosts allowed; None if it can."""
    if len(url) > MAX_URL_CHARS:
        return f"at most {MAX_URL_CHARS:,} characters"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// address with a host"
    if parts.username is not None or parts.password is not None:
        return "an address with a user or password in it is refused (a secret in a file)"
    return None


def refusal(url: str, allowed: Collection[str]) -> str | None:
    """Why the server will not post to `url` (its host not allowed); None if it will."""
    problem = url_problem(url)
    if problem is not None:
        return problem
    host = urllib.parse.urlsplit(url).hostname or ""
    if host.lower() not in {h.lower() for h in allowed}:
        return f"host {host!r} is not in PROMPTLAB_WEBHOOK_HOSTS"
    return None


def post_json(
    url: str, body: Mapping[str, Any], allowed: Collection[str]
) -> threading.Thread | None:
    """Post `body` to `url` on a thread of its own, if its host is allowed (else log why
    not and send nothing). Returns the thread (a test joins it), or None."""
    refused = refusal(url, allowed)
    if refused is not None:
        log.warning("webhook not sent to %s: %s", _shown(url), refused)
        return None
    data = json.dumps(body, default=str).encode()
    thread = threading.Thread(target=_post, args=(url, data), name="promptlab-webhook", daemon=True)
    thread.start()
    return thread


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect would take the post to a host nobody allowed


def _post(url: str, data: bytes) -> None:
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        with opener.open(request, timeout=TIMEOUT_S) as answer:
            answer.read(1024)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        log.warning("webhook to %s failed: %s", _shown(url), exc)


def _shown(url: str) -> str:
    """The address as logs show it: scheme, host and path, never its query (a token)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"
