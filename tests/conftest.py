"""Shared fixtures: every test gets its own environment and a real DuckDB file.

The demo databases take seconds to build (their runs go through the simulated model),
so each is built once per session (per xdist worker) and every test gets its own copy.
"""

from __future__ import annotations

import functools
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.config import Settings
from promptlab.prompts.registry import Registry
from promptlab.records import RunStatus
from promptlab.store import Store
from promptlab.workbench import Workbench

#: The simulated model's clock runs 20 times faster than the wall's in tests (subprocesses
#: inherit it): the same answers and recorded latencies, the demo run in about 1 s, not 10.
#: A test that wants real-time pace sets PROMPTLAB_SIM_PACE=1 itself.
TEST_SIM_PACE = "0.05"


def isolate(monkeypatch: pytest.MonkeyPatch, db: Path) -> None:
    """The database at `db`, author "tester", and none of the developer's keys or providers."""
    monkeypatch.setenv("PROMPTLAB_DB", str(db))
    monkeypatch.setenv("PROMPTLAB_AUTHOR", "tester")
    monkeypatch.setenv("PROMPTLAB_SIM_PACE", TEST_SIM_PACE)
    for name in (
        "PROMPTLAB_PROVIDERS",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENAI_BASE_URL",
        "PROMPTLAB_SERVE",
        "PROMPTLAB_SERVER",
        "PROMPTLAB_TOKEN",
        "PROMPTLAB_BROKER_URL",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' XDG_CACHE_HOME (the offline tokenizer's parsed encoding): one per
    session (per xdist worker), never the developer's ~/.cache."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(scope="session", autouse=True)
def one_component_scan() -> Iterator[None]:
    """Each AppTest's first run scanned every installed package's metadata for Streamlit
    components (0.15-0.25 s; streamlit/testing/v1/app_test.py, `_run`). The packages
    installed do not change within a session: the first scan serves every AppTest."""
    from streamlit.components.v2 import manifest_scanner

    scan_once = functools.cache(manifest_scanner.scan_component_manifests)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest_scanner, "scan_component_manifests", scan_once)
        yield


@pytest.fixture(scope="session")
def empty_db_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new database: every migration applied by the store, nothing else. Made once per
    session (per xdist worker): a copy opens in about 30 ms where making one took 50 to
    80 ms, and the suite's tests made over 600 (docs/explanation/suite.md)."""
    path = tmp_path_factory.mktemp("empty-once") / "empty.duckdb"
    Store(path).close()
    return closed_database(path)


@pytest.fixture(autouse=True)
def isolated_env(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cache_home: Path,
    empty_db_once: Path,
) -> Path:
    """No test sees the developer's database, keys, providers file or cache. Its own
    database starts new and empty (a copy of `empty_db_once`), or, marked `no_database`,
    as no file at all (a test that nothing opens it, or of what a store stamps as it
    makes one)."""
    db = tmp_path / "promptlab.duckdb"
    if request.node.get_closest_marker("no_database") is None:
        shutil.copyfile(empty_db_once, db)
    isolate(monkeypatch, db)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
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


def closed_database(path: Path) -> Path:
    """`path`, checked to be a whole database file: closed, with no write-ahead log beside it."""
    assert path.is_file() and not path.with_name(f"{path.name}.wal").exists(), path
    return path


@pytest.fixture(scope="session")
def demo_db_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`promptlab init --demo` on a new database: the demo prompts, datasets and experiment,
    the demo run on the simulated model and its clicks. Built once; copy it (`demo_db`)."""
    db = tmp_path_factory.mktemp("demo-once") / "demo.duckdb"
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate(monkeypatch, db)
        result = CliRunner().invoke(main, ["--db", str(db), "init", "--demo"])
    assert result.exit_code == 0, (result.output, result.exception)
    return closed_database(db)


@pytest.fixture
def demo_db(demo_db_once: Path, tmp_path: Path) -> Path:
    """This test's own copy of the `init --demo` database, at tmp_path/demo.duckdb."""
    copy = tmp_path / "demo.duckdb"
    shutil.copyfile(demo_db_once, copy)
    return copy


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(database, split run id, all-mode run id): the demo loaded and its experiment run
    twice on the simulated model, a 70/30 split and an all-mode run. Built once per
    session: tests that change the database copy the file first."""
    path = tmp_path_factory.mktemp("runs-once") / "runs.duckdb"
    settings = Settings.from_env({"PROMPTLAB_DB": str(path), "PROMPTLAB_AUTHOR": "tester"})
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate(monkeypatch, path)
        with Store(path) as store, Workbench(store, settings) as wb:
            wb.demo.load()
            assert not wb.analysis.has_results() and wb.analysis.runs_with_results() == []
            split = wb.runs.start(wb.runs.experiment_spec("triage-split", "tickets"))
            assert wb.runs.wait(split, 60).status == RunStatus.COMPLETED
            spec = wb.runs.experiment_spec("triage-split", "tickets", mode="all")
            paired = wb.runs.start(spec)
            assert wb.runs.wait(paired, 60).status == RunStatus.COMPLETED
    return closed_database(path), split, paired


# A real fakellm server on loopback, shared by tests of providers and the engine.
from tests.fakellm_fixtures import fakellm, fakellm_factory  # noqa: E402,F401

# A finished run over a retrying fakellm, for the item read-model, CLI and page tests.
from tests.item_run_helpers import finished_run, retrying_server  # noqa: E402,F401
