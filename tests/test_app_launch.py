"""`make run` (issue 43): the app's process serves the API before any page is viewed, so
a CLI command started before anyone opened the browser goes through it instead of
taking the database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

from click.testing import CliRunner

from promptlab.cli import main
from promptlab.server.discovery import find_server

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def app_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health") as ok:  # noqa: S310
            return bool(ok.read() == b"ok")
    except OSError:
        return False


def test_the_launched_app_serves_the_api_before_any_page_view(tmp_path: Path) -> None:
    db = tmp_path / "app.duckdb"
    api, port = free_port(), free_port()
    env = {**os.environ, "PROMPTLAB_DB": str(db), "PROMPTLAB_SERVE": f"127.0.0.1:{api}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "promptlab.ui.launch",
            "run",
            str(ROOT / "app.py"),
            "--server.port",
            str(port),
            "--server.headless",
            "true",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120  # the interpreter's imports, on a busy machine
        info = None
        while info is None:  # no page is opened: the process serves the API on its own
            assert proc.poll() is None and time.monotonic() < deadline, "no API"
            info = find_server(db)
            time.sleep(0.05)
        assert info.url == f"http://127.0.0.1:{api}"
        # A command now goes through the app's process, which owns the database. The API
        # answers as soon as the workbench is open; the demo run is submitted right after.
        while True:
            status = CliRunner().invoke(main, ["--db", str(db), "status"])
            assert status.exit_code == 0, status.output
            if "triage-split" in status.output:  # the demo, started before any page view
                break
            assert proc.poll() is None and time.monotonic() < deadline, status.output
            time.sleep(0.05)
        # ... and the pages are served after it, by the same process.
        while not app_answers(port):
            assert proc.poll() is None and time.monotonic() < deadline, "no app"
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(60)


def assert_runs_in_a_fresh_interpreter(probe: str) -> None:
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_launcher_imports_what_the_pages_import_before_serving() -> None:
    """pandas and Plotly (through views/) are loaded before the port opens, not by the
    first visitor's page."""
    probe = (
        "import sys; from promptlab.ui.launch import warm_page_imports; "
        "assert 'plotly' not in sys.modules and 'pandas' not in sys.modules; "
        f"warm_page_imports(['launch', 'run', {str(ROOT / 'app.py')!r}]); "
        "missing = [m for m in ('pandas', 'plotly', 'promptlab.views.compare', "
        "'promptlab.facades.analysis') if m not in sys.modules]; "
        "assert not missing, missing"
    )
    assert_runs_in_a_fresh_interpreter(probe)


def test_the_launcher_loads_what_a_page_s_first_run_imports_inside_functions() -> None:
    """The Compare page's first run imported scipy.stats (its t distribution) and
    `st.set_page_config` compiled Streamlit's emoji pattern: 0.7 s of the first view."""
    probe = (
        "import sys; from promptlab.ui.launch import FIRST_VIEW_IMPORTS, warm_first_view; "
        "assert 'scipy.stats' in FIRST_VIEW_IMPORTS and 'streamlit.emojis' in FIRST_VIEW_IMPORTS; "
        "assert 'scipy.stats' not in sys.modules and 'streamlit.emojis' not in sys.modules; "
        "warm_first_view(); "
        "missing = [m for m in FIRST_VIEW_IMPORTS if m not in sys.modules]; "
        "assert not missing, missing"
    )
    assert_runs_in_a_fresh_interpreter(probe)


def test_the_app_watches_no_files() -> None:
    """Each new session registered every promptlab module with the file watcher (a third
    of a second a visit): the app's config turns it off."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["fileWatcherType"] == "none"
