"""The long-lived owner: `promptlab serve` takes over the runs left waiting (`after:`),
starts them when what they wait for completes, and fires the schedules due, catching up
once with a time it missed while no owner ran."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner

from promptlab.cli import main
from promptlab.config import Settings
from promptlab.records import RunStatus
from promptlab.store import RunStore, Store
from promptlab.workbench import Workbench
from tests.test_schedules import spec_data
from tests.test_server import Served


def test_serve_adopts_waiting_runs_and_fires_the_schedules_it_missed(
    tmp_path: Path, db_path: Path
) -> None:
    with Workbench.open(Settings.from_env()) as wb:
        prep = wb.runs.start(wb.runs.spec_from_data(spec_data(tmp_path, "prep")))
        wb.runs.cancel(prep)
        wb.runs.wait(prep, timeout=30)
        evaluate = wb.runs.start(wb.runs.spec_from_data(spec_data(tmp_path, "eval", after="prep")))
        nightly = spec_data(tmp_path, "nightly", schedule="0 2 * * *")
        wb.schedules.add(wb.runs.spec_from_data(nightly))
        missed = wb.store.clock.now() - timedelta(hours=1)
        with wb.store.transaction() as tx:  # as if 02:00 came while no owner ran
            tx.execute("UPDATE schedules SET next_at = ? WHERE name = 'nightly'", [missed])
    server = Served(db_path)
    try:
        cli = CliRunner()
        listed = _until_line(cli, ["schedule", "list"], "nightly  0 2 * * *  active")
        assert "last run_" in listed, listed
        status = cli.invoke(main, ["status", evaluate])
        assert "waiting" in status.stdout and "interrupted" not in status.stdout, status.stdout

        resumed = cli.invoke(main, ["resume", prep, "--quiet"])
        assert resumed.exit_code == 0, resumed.output
        _until_line(cli, ["status", evaluate], f"run {evaluate} (eval): completed")
        assert "pause" in cli.invoke(main, ["schedule", "pause", "nightly"]).stdout
    finally:
        server.stop()
    with Store(db_path) as store:
        runs = RunStore(store)
        named = {r.name: r for r in runs.list_runs()}
        assert named["nightly"].status == RunStatus.COMPLETED
        assert [r.name for r in runs.list_runs()].count("nightly") == 1  # caught up once
        assert named["eval"].status == RunStatus.COMPLETED


def _until_line(cli: CliRunner, args: list[str], wanted: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        out = cli.invoke(main, args).output
        if wanted in out and "never run" not in out:
            return out
        assert time.monotonic() < deadline, out
        time.sleep(0.2)
