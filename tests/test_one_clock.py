"""One clock: every stamp the store, the audit log, the engine and the writer make comes
from the clock the store was opened with."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from promptlab.config import Settings
from promptlab.engine.record.writer import BatchWriter
from promptlab.engine.testing import ManualClock
from promptlab.store import ItemStore, Store
from promptlab.workbench import Workbench

START = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)


def stamp_columns(store: Store) -> list[tuple[str, str]]:
    with store.read() as cur:
        return cur.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE data_type LIKE 'TIMESTAMP%' AND table_schema = 'main' "
            "ORDER BY table_name, column_name"
        ).fetchall()


@pytest.mark.no_database  # its migrations too are stamped by the manual clock
def test_a_whole_demo_run_is_stamped_by_the_manual_clock(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    providers = tmp_path / "providers.yaml"
    # The limiter runs on the manual clock too: a budget no refill is needed for.
    providers.write_text("endpoints:\n  sim: {kind: sim, latency_scale: 0, rpm: 6000000}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    clock = ManualClock(START)
    shown = {clock.now()}
    with Workbench.open(Settings.from_env(), clock=clock) as wb:
        wb.demo.load()  # prompts, labels, datasets, experiments, their audit events
        clock.advance(60)
        shown.add(clock.now())
        run_id = wb.demo.start_run()
        assert run_id is not None
        assert wb.runs.wait(run_id, timeout=120).status == "completed"
        wb.demo.join()  # the simulated clicks
        clock.advance(60)
        shown.add(clock.now())
        key = wb.runs.items(run_id, limit=1).rows[0].key
        wb.analysis.rate_result(run_id, key, "thumbs_up")
        wb.analysis.detect_anomalies(run_id)
        wb.exports.write_table("results", "csv", tmp_path / "results.csv", run_id=run_id)

    stamped: dict[str, int] = {}
    with Store(db_path) as store:
        for table, column in stamp_columns(store):
            with store.read() as cur:
                values = cur.execute(
                    f'SELECT DISTINCT "{column}" FROM "{table}" WHERE "{column}" IS NOT NULL'
                ).fetchall()
            found = {v[0].astimezone(UTC) for v in values}
            assert found <= shown, f"{table}.{column} has stamps the clock never showed: {found}"
            if found:
                stamped[f"{table}.{column}"] = len(found)
    # The stamps read back cover every kind of record the run and its setup wrote.
    for column in (
        "_migrations.applied_at",
        "prompt_versions.created_at",
        "datasets.imported_at",
        "experiments.created_at",
        "experiment_revisions.created_at",
        "label_events.moved_at",
        "runs.submitted_at",
        "runs.started_at",
        "runs.finished_at",
        "run_events.changed_at",
        "items.updated_at",
        "attempts.started_at",
        "attempts.ended_at",
        "results.finished_at",
        "feedback.imported_at",
        "feedback.event_time",
        "audit_events.at",
    ):
        assert column in stamped, f"{column} not stamped: {sorted(stamped)}"


def test_the_writers_stall_timing_reads_the_clock_it_is_given(store: Store) -> None:
    clock = ManualClock(START)
    writer = BatchWriter(ItemStore(store), clock=clock)
    writer._stalled_since = clock.monotonic()  # a stall that began now
    clock.advance(42.5)
    assert writer._stalled_for() == 42.5
