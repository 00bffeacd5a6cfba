"""Process-wide resources for the app, built once and shared by every session."""

from __future__ import annotations

import streamlit as st

from promptlab.config import Settings
from promptlab.store import Store


@st.cache_resource(show_spinner=False)
def get_settings() -> Settings:
    return Settings.from_env()


@st.cache_resource(show_spinner="Opening the database…")
def get_store() -> Store:
    return Store(get_settings().db_path)
