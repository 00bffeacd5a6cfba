"""Process-wide resources for the app, built once and shared by every browser session."""

from __future__ import annotations

import streamlit as st

from promptlab.config import Settings
from promptlab.demo import load_demo_prompts
from promptlab.engine import Engine
from promptlab.redact import install_log_redaction
from promptlab.registry import Registry
from promptlab.store import Store


def get_settings() -> Settings:
    """Settings are re-read each run (cheap), so the cached store follows PROMPTLAB_DB."""
    return Settings.from_env()


@st.cache_resource(show_spinner="Opening the database…")
def _open_store(db_path: str, load_demo: bool) -> Store:
    store = Store(db_path)
    registry = Registry(store)
    if load_demo and registry.is_empty():
        load_demo_prompts(registry)  # first start with an empty database
    return store


def get_store() -> Store:
    settings = get_settings()
    return _open_store(str(settings.db_path), settings.load_demo)


def get_registry() -> Registry:
    return Registry(get_store())


@st.cache_resource(show_spinner="Starting the engine…")
def _start_engine(db_path: str, load_demo: bool) -> Engine:
    install_log_redaction()  # the engine logs provider errors, which may echo a key
    return Engine(_open_store(db_path, load_demo), settings=get_settings())


def get_engine() -> Engine:
    """The process's one engine (own event-loop thread), shared by every browser session."""
    settings = get_settings()
    return _start_engine(str(settings.db_path), settings.load_demo)
