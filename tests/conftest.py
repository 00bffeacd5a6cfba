"""Shared fixtures: every test gets its own environment and a real DuckDB file."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from promptlab.prompts.registry import Registry
from promptlab.store import Store


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test sees the developer's database, keys or providers file."""
    db = tmp_path / "promptlab.duckdb"
    monkeypatch.setenv("PROMPTLAB_DB", str(db))
    monkeypatch.setenv("PROMPTLAB_AUTHOR", "tester")
    for name in ("PROMPTLAB_PROVIDERS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return db


@pytest.fixture(autouse=True)
def close_app_resources() -> Iterator[None]:
    """Pages open a workbench (database and engine thread) per process: close it after."""
    yield
    resources = sys.modules.get("promptlab.ui.resources")
    if resources is not None:
        resources.close_all()


@pytest.fixture
def db_path(isolated_env: Path) -> Path:
    return isolated_env


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store(db_path) as s:
        yield s


@pytest.fixture
def registry(store: Store) -> Registry:
    return Registry(store)


# A real fakellm server on loopback, shared by tests of providers and the engine.
from tests.fakellm_fixtures import fakellm, fakellm_factory  # noqa: E402,F401

# A finished run over a retrying fakellm, for the item read-model, CLI and page tests.
from tests.item_run_helpers import finished_run, retrying_server  # noqa: E402,F401
