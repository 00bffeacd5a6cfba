"""Process-wide resources for the app, built once and shared by every browser session."""

from __future__ import annotations

import atexit
import logging
import threading
from typing import TYPE_CHECKING

import streamlit as st

from promptlab.audit.redact import install_log_redaction
from promptlab.config import Settings
from promptlab.errors import PromptlabError
from promptlab.workbench import Workbench

if TYPE_CHECKING:
    from promptlab.server.run import Serving

log = logging.getLogger(__name__)

_opened: list[Workbench] = []
#: API servers beside the pages (PROMPTLAB_SERVE), stopped before their workbench closes.
_serving: list[Serving] = []
_opened_lock = threading.Lock()
#: Databases this process loaded the demo into (they were empty): the app runs the demo
#: experiment on them once (`start_demo_run`).
_fresh_demo: set[str] = set()


def get_settings() -> Settings:
    """Settings are re-read each run (cheap), so the cached workbench follows PROMPTLAB_DB."""
    return Settings.from_env()


@st.cache_resource(show_spinner="Opening the database…")
def _open_workbench(db_path: str, load_demo: bool) -> Workbench:
    install_log_redaction()  # the engine logs provider errors, which may echo a key
    workbench = Workbench.open(get_settings())
    if load_demo and workbench.prompts.is_empty():
        workbench.demo.load()  # first start with an empty database
        with _opened_lock:
            _fresh_demo.add(db_path)
    with _opened_lock:
        if not _opened:
            # Stop the engine when the server stops: answers it still holds (a full disk)
            # are spilled for the next start instead of being lost.
            atexit.register(close_all)
        _opened.append(workbench)
    if workbench.settings.serve:
        _serve(workbench, workbench.settings.serve)
    return workbench


def _serve(workbench: Workbench, address: str) -> None:
    """Serve the API beside the pages (PROMPTLAB_SERVE=HOST:PORT): the CLI and services
    then go through this process, which owns the database and the engine."""
    from promptlab.server.run import Serving  # FastAPI and uvicorn only when serving

    host, _, port = address.rpartition(":")
    try:
        serving = Serving(workbench, host.strip("[]") or "127.0.0.1", int(port)).start()
    except (OSError, ValueError) as exc:
        log.warning("PROMPTLAB_SERVE=%s: not serving the API: %s", address, exc)
        return
    log.info("serving the API at %s", serving.info.url)
    with _opened_lock:
        _serving.append(serving)


def get_workbench() -> Workbench:
    """The process's one workbench per database: its store and its shared engine."""
    settings = get_settings()
    return _open_workbench(str(settings.db_path), settings.load_demo)


def start_demo_run() -> None:
    """On the app's first start with an empty database, run the demo experiment for real.

    It runs in the background on the simulated model (about 3 s); the Runs and
    Experiments pages show it live and then finished.
    """
    db_path = str(get_settings().db_path)
    with _opened_lock:
        fresh = db_path in _fresh_demo
        _fresh_demo.discard(db_path)
    if fresh:
        try:
            get_workbench().demo.start_run()
        except PromptlabError as exc:  # the app still works; the demo run is a nicety
            log.warning("the demo experiment did not start: %s", exc)


def close_all() -> None:
    """Close every workbench this process opened (engines, databases); for tests."""
    _open_workbench.clear()
    with _opened_lock:
        _fresh_demo.clear()
        opened, _opened[:] = list(_opened), []
        serving, _serving[:] = list(_serving), []
    for server in serving:  # first: no request may reach a closed workbench
        server.stop()
    for workbench in opened:
        workbench.close()
