"""Issue 22, item 7: the production-logs source of the Compare page gets the same ECDF and
over-time charts as a run. Their reads, on a real database with an imported log: each
version's request latencies, and its completion rate and p90 latency per time bucket."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from promptlab.config import Settings
from promptlab.errors import PromptlabError
from promptlab.store import Store
from promptlab.workbench import Workbench

A, B = "ticket-triage@1.1.0", "ticket-triage@2.0.0"
T0 = datetime(2026, 11, 1, 9, tzinfo=UTC)


@pytest.fixture
def wb(demo_db_once: Path, tmp_path: Path) -> Iterator[Workbench]:
    db = tmp_path / "logs.duckdb"
    shutil.copyfile(demo_db_once, db)
    settings = Settings.from_env({"PROMPTLAB_DB": str(db), "PROMPTLAB_AUTHOR": "tester"})
    with Store(db) as store, Workbench(store, settings) as bench:
        yield bench


Line = tuple[str, str, float | None, bool | None, datetime]


def log_lines() -> list[Line]:
    """(version, unit, latency, completed, time): three days, A each day, B on two."""
    lines: list[Line] = []
    for day in range(3):
        for i in range(10):
            when = T0 + timedelta(days=day, minutes=i)
            lines.append((A, f"u{i}", 100.0 + 10 * i + day, i % 4 != 0, when))
            if day < 2:
                lines.append((B, f"w{i}", 200.0 + 10 * i, i % 2 == 0, when))
    lines.append((B, "w0", None, None, T0 + timedelta(days=1, hours=1)))  # says nothing
    return lines


def import_log(wb: Workbench, tmp_path: Path) -> list[Line]:
    lines = log_lines()
    path = tmp_path / "prod.csv"

    def cell(value: object) -> str:
        return (
            "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        )

    path.write_text(
        "version,unit_id,latency_ms,completed,event_time\n"
        + "".join(
            f"{v},{u},{cell(lat)},{cell(done)},{t.isoformat()}\n" for v, u, lat, done, t in lines
        )
    )
    assert wb.analysis.import_logs(path) == len(lines)
    return lines


def test_log_latencies_are_the_versions_request_latencies(wb: Workbench, tmp_path: Path) -> None:
    lines = import_log(wb, tmp_path)
    for version in (A, B):
        expected = sorted(lat for v, _, lat, _, _ in lines if v == version and lat is not None)
        assert sorted(wb.analysis.log_latencies(version).tolist()) == expected
    since = T0 + timedelta(days=1)
    expected = sorted(lat for v, _, lat, _, t in lines if v == A and lat is not None and t >= since)
    assert sorted(wb.analysis.log_latencies(A, since=since).tolist()) == expected
    assert wb.analysis.log_latencies(A, since="2030-01-01").size == 0


def test_logs_over_time_bucket_completion_and_p90_per_version(
    wb: Workbench, tmp_path: Path
) -> None:
    lines = import_log(wb, tmp_path)
    series = wb.analysis.log_metrics_over_time([A, B])
    assert series.unit == "hour"  # a span of two days and a bit
    assert series.run_id == ""
    # Buckets in time order, A before B within one.
    keys = [(b.start, b.variant) for b in series.buckets]
    assert keys == sorted(keys, key=lambda k: (k[0], k[1] != A))
    assert {b.variant for b in series.buckets} == {A, B}
    for bucket in series.buckets:
        start = bucket.start.astimezone(UTC)
        inside = [
            line
            for line in lines
            if line[0] == bucket.variant and start <= line[4] < start + timedelta(hours=1)
        ]
        known = [done for _, _, _, done, _ in inside if done is not None]
        assert bucket.finished == len(known)  # requests whose completion is known
        assert bucket.completed == sum(known)
        latencies = [lat for _, _, lat, _, _ in inside if lat is not None]
        if latencies:
            assert bucket.latency_p90_ms == pytest.approx(float(np.quantile(latencies, 0.9)))
        else:
            assert bucket.latency_p90_ms is None
    assert sum(b.finished for b in series.buckets if b.variant == B) == 20
    late = wb.analysis.log_metrics_over_time([A, B], since=T0 + timedelta(days=2))
    assert {b.variant for b in late.buckets} == {A}
    assert late.unit == "minute"  # nine minutes of one version


def test_logs_over_time_of_an_unknown_version_is_an_error(wb: Workbench) -> None:
    with pytest.raises(PromptlabError):
        wb.analysis.log_metrics_over_time(["no-such-prompt@9.9.9"])
