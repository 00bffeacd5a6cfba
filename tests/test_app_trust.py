"""What a visitor can do to the app's process (issue 37, item 6): no websocket message
splits its engine, it binds loopback unless told otherwise, and served off loopback
without sign-in it refuses (PROMPTLAB_ALLOW_OPEN=1 says the network is trusted)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from streamlit import config
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.testing.v1 import AppTest
from websockets.sync.client import ClientConnection, connect

from promptlab.server.discovery import ServerInfo, find_server
from promptlab.ui import resources
from promptlab.ui.signin import ALLOW_OPEN, refusal
from tests.test_browser import ROOT, started_app

APP = str(ROOT / "app.py")
#: Generous bounds for a busy 2-core machine: the first run of app.py opens the database.
SCRIPT_RUN_TIMEOUT_S = 120


@contextmanager
def stream(url: str) -> Iterator[ClientConnection]:
    """A browser session's websocket, as the page opens it (`/_stcore/stream`)."""
    ws_url = url.replace("http://", "ws://", 1) + "/_stcore/stream"
    with connect(ws_url, subprotocols=["streamlit"], open_timeout=60) as ws:  # type: ignore[list-item]
        yield ws


def run_script(ws: ClientConnection, page: str = "") -> None:
    """Ask for a run of app.py (what a page load does) and wait until it finished."""
    state = ClientState(query_string="", page_name=page)
    ws.send(BackMsg(rerun_script=state).SerializeToString())
    deadline = time.monotonic() + SCRIPT_RUN_TIMEOUT_S
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "app.py did not finish a run"
        data = ws.recv(timeout=remaining)
        msg = ForwardMsg()
        msg.ParseFromString(data if isinstance(data, bytes) else data.encode())
        kind = msg.WhichOneof("type")
        if kind == "delta" and msg.delta.new_element.WhichOneof("type") == "exception":
            raise AssertionError(f"app.py raised: {msg.delta.new_element.exception}")
        if kind == "script_finished" and msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
            return


def served_api(db: Path) -> ServerInfo:
    """The API the app serves beside its pages (PROMPTLAB_SERVE): one per workbench."""
    info = find_server(db)
    log = db.parent / "streamlit.log"
    assert info is not None, f"the app did not serve the API: {log.read_text()}"
    return info


def test_a_clear_cache_message_does_not_open_a_second_engine(tmp_path: Path) -> None:
    """The attack: a visitor who has not signed in sends `BackMsg{clear_cache: true}`;
    Streamlit clears every `st.cache_resource` of the process, and the next page load
    opened a second workbench (engine, API server) on the same database."""
    db = tmp_path / "app.duckdb"
    with started_app(tmp_path, PROMPTLAB_SERVE="127.0.0.1:0", PROMPTLAB_DEMO="0") as url:
        with stream(url) as ws:
            run_script(ws)  # the first page load opens the workbench and serves its API
        before = served_api(db)
        with stream(url) as ws:
            ws.send(BackMsg(clear_cache=True).SerializeToString())
            run_script(ws)  # the attacker's own page load right after
        with stream(url) as ws:
            run_script(ws, page="runs")  # and another visitor's
        after = served_api(db)
        # Still the first workbench: its API server (and token) is the one announced,
        # and it answers; a second workbench would have started and announced its own.
        assert after == before
        request = urllib.request.Request(
            f"{before.url}/v1/runs", headers={"Authorization": f"Bearer {before.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 (loopback)
            assert resp.status == 200


def test_clearing_streamlit_caches_in_process_keeps_the_one_workbench(db_path: Path) -> None:
    import streamlit as st

    first = resources.get_workbench()
    st.cache_resource.clear()  # what the clear_cache message does, for every user
    st.cache_data.clear()
    assert resources.get_workbench() is first
    assert resources.open_workbenches() == [first]
    resources.close_all()  # tests (and the process's exit) still close everything
    assert resources.open_workbenches() == []
    again = resources.get_workbench()
    assert again is not first and resources.open_workbenches() == [again]


def _listening_hosts(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on `port` (Linux's /proc/net)."""
    hosts: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                # Each 32-bit word is stored in host (little-endian) order.
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                hosts.add(str(ipaddress.ip_address(words)))
    return hosts


def _resolved_address() -> str | None:
    """`server.address` as `streamlit run app.py` in the repository resolves it."""
    code = (
        "from streamlit import config; config.get_config_options(); "
        "print(config.get_option('server.address'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    value = out.stdout.strip().splitlines()[-1]
    return None if value == "None" else value


def test_make_run_binds_loopback_unless_told_otherwise() -> None:
    def run_line(*args: str) -> str:
        out = subprocess.run(
            ["make", "-n", "run", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        # `make run` starts Streamlit through promptlab/ui/launch.py (`... run app.py ...`).
        return next(line for line in out.stdout.splitlines() if " run app.py " in line)

    assert "--server.address 127.0.0.1 " in run_line()
    assert "--server.address 0.0.0.0 " in run_line("HOST=0.0.0.0")
    # `streamlit run app.py` without make: the repository's config binds loopback too.
    assert _resolved_address() == "127.0.0.1"


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc/net")
def test_streamlit_run_without_an_address_listens_on_loopback_only(tmp_path: Path) -> None:
    # Checked first: without the config, this would bind every interface.
    assert _resolved_address() == "127.0.0.1"
    from tests.test_browser import free_port

    port = free_port()
    with started_app(tmp_path, port=port, address=None, PROMPTLAB_DEMO="0"):
        hosts = _listening_hosts(port)
    assert hosts and all(host in {"127.0.0.1", "::1"} for host in hosts), hosts


@pytest.fixture
def served_on() -> Iterator[Callable[[str | None], None]]:
    """Set the app's `server.address` (as `--server.address` would) for an AppTest."""
    previous = config.get_option("server.address")

    def serve_on(address: str | None) -> None:
        config.set_option("server.address", address)

    yield serve_on
    config.set_option("server.address", previous)


AUTH = {
    "redirect_uri": "http://127.0.0.1:8501/oauth2callback",
    "cookie_secret": "a-long-random-secret-for-the-cookie",
    "client_id": "promptlab",
    "client_secret": "client-secret",
    "server_metadata_url": "http://127.0.0.1:1/.well-known/openid-configuration",
}


@pytest.mark.no_database
@pytest.mark.parametrize("address", ["0.0.0.0", "", "192.0.2.10", "::"])
def test_served_off_loopback_without_sign_in_the_app_refuses(
    address: str,
    served_on: Callable[[str | None], None],
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ALLOW_OPEN, raising=False)
    served_on(address or None)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert [e.value for e in at.error] == [refusal(address, signs_in=False, allowed=False)]
    assert "without sign-in" in at.error[0].value and ALLOW_OPEN in at.error[0].value
    # One line and nothing else: no page, no sidebar, and no database opened.
    assert len(at.main.children) == 1 and not at.sidebar.children
    assert not db_path.exists() and resources.open_workbenches() == []


def test_the_explicit_flag_or_sign_in_lets_the_app_serve_off_loopback(
    served_on: Callable[[str | None], None], db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served_on("0.0.0.0")
    monkeypatch.setenv(ALLOW_OPEN, "1")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and not at.error
    assert resources.open_workbenches() != []  # the app opened its database
    resources.close_all()

    monkeypatch.delenv(ALLOW_OPEN)
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["auth"] = AUTH
    at.user = {"is_logged_in": False}
    at.run()
    assert not at.exception and not at.error
    assert [b.label for b in at.button] == ["Sign in"]  # the sign-in screen, not refused
    assert resources.open_workbenches() == []


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", False),
        ("127.0.0.2", False),
        ("::1", False),
        ("[::1]", False),
        ("localhost", False),
        ("0.0.0.0", True),
        ("::", True),
        ("", True),
        ("192.168.1.5", True),
        ("app.example.com", True),
    ],
)
def test_which_addresses_want_sign_in(address: str, refused: bool) -> None:
    assert (refusal(address, signs_in=False, allowed=False) is not None) is refused
    assert refusal(address, signs_in=True, allowed=False) is None
    assert refusal(address, signs_in=False, allowed=True) is None
