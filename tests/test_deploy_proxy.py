"""The deployment guide's reverse proxy, for real (issue 59, item 3): deploy/nginx/
promptlab.conf in Debian's nginx (only its ports, name and certificate paths changed),
TLS with a certificate made here, in front of the app started as the systemd unit starts
it (`python -m promptlab.ui.launch`, the API beside it, sign-in from a secrets file).
A person opens a deep link over HTTPS, signs in at a mock OpenID Connect provider, and
lands on the page; the API answers behind the same proxy, with its token."""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from promptlab.server.discovery import find_server
from tests.deb_tools import nginx
from tests.test_browser import PAGE_STEP_MS, free_port
from tests.test_browser import page as page  # the fixture
from tests.test_browser import pytestmark as browser_marks
from tests.test_browser_addresses import settled_address
from tests.test_browser_signin import not_the_app as not_the_app  # fixtures
from tests.test_browser_signin import oidc_provider as oidc_provider
from tests.test_browser_signin import secrets_file, sign_in_at

if TYPE_CHECKING:
    from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "deploy" / "nginx" / "promptlab.conf"
NGINX = nginx()

pytestmark = [
    *browser_marks,
    pytest.mark.self_signed,
    pytest.mark.skipif(NGINX is None, reason="nginx is not unpacked (make test)"),
]


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (what a team gets from its CA)."""
    cert, key = folder / "fullchain.pem", folder / "privkey.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def proxy_config(folder: Path, ports: dict[str, int], cert: Path, key: Path) -> Path:
    """The shipped server blocks with this test's ports, name and certificate, inside a
    minimal nginx.conf whose logs and temporary files stay in `folder`."""
    text = CONF.read_text(encoding="utf-8")
    for shipped, here in (
        ("listen 80;", f"listen 127.0.0.1:{ports['http']};"),
        ("listen 443 ssl;", f"listen 127.0.0.1:{ports['https']} ssl;"),
        ("promptlab.example.com", "127.0.0.1"),
        ("/etc/ssl/promptlab/fullchain.pem", str(cert)),
        ("/etc/ssl/promptlab/privkey.pem", str(key)),
        ("127.0.0.1:8765", f"127.0.0.1:{ports['api']}"),
        ("127.0.0.1:8501", f"127.0.0.1:{ports['app']}"),
    ):
        assert shipped in text, f"{CONF} no longer holds {shipped!r}"
        text = text.replace(shipped, here)
    (folder / "promptlab.conf").write_text(text, encoding="utf-8")
    temp = folder / "temp"
    temp.mkdir(mode=0o777)
    temp.chmod(0o777)  # nginx's workers may run as nobody
    main = folder / "nginx.conf"
    temps = "".join(
        f"  {kind}_temp_path {temp / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    main.write_text(
        f"worker_processes 1;\npid {folder / 'nginx.pid'};\nerror_log {folder / 'error.log'};\n"
        f"events {{}}\nhttp {{\n  access_log {folder / 'access.log'};\n{temps}"
        f"  include {folder / 'promptlab.conf'};\n}}\n",
        encoding="utf-8",
    )
    return main


@pytest.fixture
def behind_nginx(tmp_path: Path, oidc_provider: str) -> Iterator[tuple[str, str, Path]]:
    """The app and its API behind nginx; yields the proxy's https and http URLs and the
    database."""
    ports = {name: free_port() for name in ("http", "https", "api", "app")}
    url = f"https://127.0.0.1:{ports['https']}"
    # Behind the proxy, the provider sends the person back to the proxy's address.
    secrets = secrets_file(tmp_path, url, oidc_provider)
    db = tmp_path / "app.duckdb"
    env = {
        **os.environ,
        "PROMPTLAB_DB": str(db),
        "PROMPTLAB_SERVE": f"127.0.0.1:{ports['api']}",
        "PROMPTLAB_DEMO": "0",
    }
    app = subprocess.Popen(
        [sys.executable, "-m", "promptlab.ui.launch", "run", "app.py"]
        + ["--server.address", "127.0.0.1", "--server.port", str(ports["app"])]
        + ["--server.headless", "true", "--secrets.files", str(secrets)],
        cwd=ROOT,
        env=env,
        stdout=(tmp_path / "app.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    cert, key = certificate(tmp_path)
    config = proxy_config(tmp_path, ports, cert, key)
    assert NGINX is not None
    proxy = subprocess.Popen(
        [str(NGINX), "-p", str(tmp_path), "-c", str(config), "-e", str(tmp_path / "error.log")]
        + ["-g", "daemon off;"],
        stdout=(tmp_path / "nginx.out").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while answered(f"{url}/_stcore/health") != 200:
            assert app.poll() is None, (tmp_path / "app.log").read_text()[-3000:]
            assert proxy.poll() is None, (tmp_path / "error.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the app did not answer behind the proxy"
            time.sleep(0.1)
        yield url, f"http://127.0.0.1:{ports['http']}", db
    finally:
        proxy.terminate()
        app.terminate()
        proxy.wait(30)
        app.wait(60)


def answered(url: str, token: str | None = None) -> int:
    """The status an https request gets (the test's own certificate accepted)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:  # noqa: S310
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def redirected(url: str) -> str | None:
    """Where a plain-http request is sent (its Location), without following it."""

    class Stay(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    try:
        urllib.request.build_opener(Stay).open(url, timeout=10)  # noqa: S310 - loopback
    except urllib.error.HTTPError as exc:
        return exc.headers.get("Location") if exc.code == 301 else None
    return None


def test_a_person_signs_in_through_the_proxy_and_the_api_answers_behind_it(
    behind_nginx: tuple[str, str, Path], page: Page, oidc_provider: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    url, http, db = behind_nginx
    assert redirected(f"{http}/prompts") == "https://127.0.0.1/prompts"  # plain http: to TLS
    # A deep link over TLS shows the sign-in screen and nothing else.
    page.goto(f"{url}/prompts")
    sign_in = page.get_by_role("button", name="Sign in")
    expect(sign_in).to_be_visible(timeout=PAGE_STEP_MS)
    settled_address(page)
    expect(page.get_by_text("Page not found")).to_have_count(0)
    sign_in_at(page, sign_in, oidc_provider)
    # Back through the proxy (its /oauth2callback), signed in, over the WebSocket.
    signed_in = re.compile(r"Signed in as ada@\u2060?example\.com")
    expect(page.get_by_text(signed_in)).to_be_visible(timeout=PAGE_STEP_MS)
    assert page.url.startswith(url)
    page.screenshot(path=str(tmp_path / "deploy-proxy.png"), full_page=True)
    # The API behind the same proxy: refused without a token, answered with one.
    info = find_server(db, {})
    assert info is not None
    assert answered(f"{url}/v1/health") == 401
    assert answered(f"{url}/v1/health", info.token) == 200
    assert answered(f"{url}/metrics", info.token) == 200
    log = (tmp_path / "access.log").read_text()
    assert json.dumps("/v1/health")[1:-1] in log and "/_stcore/stream" in log
