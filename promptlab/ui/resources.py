"""Process-wide resources for the app, built once and shared by every browser session.

The workbench (database, engine, the API served beside the pages) lives in a registry of
this module, not in `st.cache_resource`: any browser can clear Streamlit's caches with
one websocket message (`BackMsg{clear_cache}`), and a cleared cache would open a second
engine on the same database beside the first. Only `close_all()` empties the registry.
"""

from __future__ import annotations

import atexit
import gc
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st
from streamlit import config as streamlit_config

from promptlab.audit.redact import install_log_redaction
from promptlab.config import Settings
from promptlab.errors import PromptlabError
from promptlab.workbench import Workbench

if TYPE_CHECKING:
    from promptlab.server.run import Serving

log = logging.getLogger(__name__)

#: Guards everything below; held while a workbench opens, so two sessions asking at once
#: for the same database get one workbench.
_lock = threading.Lock()
#: The process's one workbench per database, by the database file's resolved path.
_workbenches: dict[str, Workbench] = {}
#: API servers beside the pages (PROMPTLAB_SERVE), stopped before their workbench closes.
_serving: list[Serving] = []
#: Databases this process loaded the demo into (they were empty): the app runs the demo
#: experiment on them once (`start_demo_run`).
_fresh_demo: set[str] = set()
_atexit_registered = False
#: Pages whose first run in this process has ended (`settle_heap`).
_settled: set[str] = set()
#: The app process's young-generation threshold (Python's default is 700): a page's run
#: then collects once or twice, not some 50 times.
APP_YOUNG_THRESHOLD = 20_000


def get_settings() -> Settings:
    """Settings are re-read each run (cheap), so the workbench follows PROMPTLAB_DB."""
    return Settings.from_env()


def _key(db_path: Path) -> str:
    """One key per database file, however its path is spelled."""
    return str(Path(db_path).expanduser().resolve())


def get_workbench() -> Workbench:
    """The process's one workbench per database: its store and its shared engine."""
    settings = get_settings()
    key = _key(settings.db_path)
    with _lock:
        workbench = _workbenches.get(key)
        if workbench is None:
            with st.spinner("Opening the database…"):
                workbench = _open(settings, key)
    return workbench


def _open(settings: Settings, key: str) -> Workbench:
    """Open the workbench of `key` and register it (the caller holds `_lock`)."""
    global _atexit_registered
    install_log_redaction()  # the engine logs provider errors, which may echo a key
    workbench = Workbench.open(settings)
    try:
        if settings.load_demo and workbench.prompts.is_empty():
            workbench.demo.load()  # first start with an empty database
            _fresh_demo.add(key)
    except BaseException:
        workbench.close()  # not registered: nothing else would close it
        raise
    if not _atexit_registered:
        # Stop the engine when the server stops: answers it still holds (a full disk)
        # are spilled for the next start instead of being lost.
        atexit.register(close_all)
        _atexit_registered = True
    _workbenches[key] = workbench
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
    _serving.append(serving)


def start_demo_run() -> None:
    """On the app's first start with an empty database, run the demo experiment for real.

    It runs in the background on the simulated model (about 3 s); the Runs and
    Experiments pages show it live and then finished.
    """
    key = _key(get_settings().db_path)
    with _lock:
        fresh = key in _fresh_demo
        _fresh_demo.discard(key)
    if fresh:
        try:
            get_workbench().demo.start_run()
        except PromptlabError as exc:  # the app still works; the demo run is a nicety
            log.warning("the demo experiment did not start: %s", exc)


def settle_heap(page: str) -> None:
    """After a page's first run in this process, keep what it left out of the collector's
    walks; and collect young objects less often.

    Streamlit collects the whole heap after every script run, and Python did so on its
    own too, 5 to 50 collections a run: with the workbench, pandas and Plotly loaded
    they walked some 200,000 objects that live as long as the process, 0.2 to 0.5 s of
    each page's run on this 2-core machine under load, more than the page's own work
    (see bench/pages.py). Objects alive after the first run of each page (its imports,
    the workbench) are moved out of the collector's sight (`gc.freeze`), once per page,
    garbage collected first so none of it is kept (that one collection is the first
    visit's); the young threshold is raised as the engine raises it while runs go
    (engine/collector.py, which then leaves it alone): a run then collects once, in
    milliseconds. PROMPTLAB_TUNE_GC=0 leaves the collector as Python has it, and so
    does a script run by AppTest: that process is the test runner's, not the app's.
    """
    with _lock:
        if page in _settled or _under_apptest() or not get_settings().tune_gc:
            return
        _settled.add(page)
        young, middle, old = gc.get_threshold()
        if gc.isenabled() and 0 < young < APP_YOUNG_THRESHOLD:
            gc.set_threshold(APP_YOUNG_THRESHOLD, middle, old)
    gc.collect()
    gc.freeze()


def _under_apptest() -> bool:
    """True while AppTest runs the script (it patches `config.get_option`, which
    `st.get_option` does not go through)."""
    return bool(streamlit_config.get_option("global.appTest"))


def open_workbenches() -> list[Workbench]:
    """The workbenches this process holds open now (one per database)."""
    with _lock:
        return list(_workbenches.values())


def close_all() -> None:
    """Close every workbench this process opened (engines, databases); for tests."""
    with _lock:
        _fresh_demo.clear()
        opened = list(_workbenches.values())
        _workbenches.clear()
        serving, _serving[:] = list(_serving), []
    for server in serving:  # first: no request may reach a closed workbench
        server.stop()
    for workbench in opened:
        workbench.close()
