"""The server's held experiment configs (server/service_routes.py ExperimentConfigs),
which the live gateway assigns by: a change that lands while a read of the store is
under way (a rollout's kill) is never undone by that read's older revision."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptlab.config import Settings
from promptlab.experiments.config import ExperimentConfig
from promptlab.server.service_routes import ExperimentConfigs
from promptlab.workbench import Workbench


def test_a_kill_during_a_read_stays_held(demo_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPTLAB_DB", str(demo_db))
    with Workbench.open(Settings.from_env()) as wb:
        name = wb.experiments.list()[0].name
        configs = ExperimentConfigs(wb)
        read = wb.experiments.get
        killed: list[str] = []

        def read_then_killed(asked: str) -> ExperimentConfig:
            before = read(asked)  # the store's revision as the read found it
            if not killed:  # the update reads it too
                killed.append(asked)
                wb.experiments.update(asked, killed=True, note="killed during the read")
            return before

        monkeypatch.setattr(wb.experiments, "get", read_then_killed)
        first = read(name).revision
        loaded = configs.load(name)  # reads `first`; the kill lands meanwhile
        held = configs.current(name)
        assert loaded.killed and held.killed and held.revision == first + 1
