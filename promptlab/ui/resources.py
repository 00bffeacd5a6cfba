"""Process-wide resources for the app, built once and shared by every browser session."""

from __future__ import annotations

import atexit
import threading

import streamlit as st

from promptlab.config import Settings
from promptlab.redact import install_log_redaction
from promptlab.workbench import Workbench

_opened: list[Workbench] = []
_opened_lock = threading.Lock()


def get_settings() -> Settings:
    """Settings are re-read each run (cheap), so the cached workbench follows PROMPTLAB_DB."""
    return Settings.from_env()


@st.cache_resource(show_spinner="Opening the database…")
def _open_workbench(db_path: str, load_demo: bool) -> Workbench:
    install_log_redaction()  # the engine logs provider errors, which may echo a key
    workbench = Workbench.open(get_settings())
    if load_demo and workbench.prompts.is_empty():
        workbench.load_demo()  # first start with an empty database
    with _opened_lock:
        if not _opened:
            # Stop the engine when the server stops: answers it still holds (a full disk)
            # are spilled for the next start instead of being lost.
            atexit.register(close_all)
        _opened.append(workbench)
    return workbench


def get_workbench() -> Workbench:
    """The process's one workbench per database: its store and its shared engine."""
    settings = get_settings()
    return _open_workbench(str(settings.db_path), settings.load_demo)


def close_all() -> None:
    """Close every workbench this process opened (engines, databases); for tests."""
    _open_workbench.clear()
    with _opened_lock:
        opened, _opened[:] = list(_opened), []
    for workbench in opened:
        workbench.close()
