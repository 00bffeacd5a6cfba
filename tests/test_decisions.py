"""Deciding on production logs: the final look at two versions, taken once, by a person,
when the planned units are in; stored with its figures and an audit event."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from promptlab.analysis.simulate import Traffic, simulate_arm
from promptlab.config import Settings
from promptlab.errors import PromptlabError
from promptlab.facades.audit import AuditFilter
from promptlab.workbench import Workbench

REFS = ("ticket-triage@1.1.0", "ticket-triage@2.0.0")


def _logs(tmp_path: Path, units: int) -> Path:
    rng = np.random.default_rng(61)
    lines = ["version,unit_id,latency_ms,clicked,completed,event_time"]
    for index, ref in enumerate(REFS):
        arm = simulate_arm(Traffic(units=units), rng)
        for u, ms, click, done in zip(
            arm.unit, arm.latency, arm.clicked, arm.completed, strict=True
        ):
            lines.append(
                f"{ref},user-{index}-{u:04d},{float(ms)!r},{str(click).lower()},"
                f"{str(done).lower()},2026-11-20T10:00:00Z"
            )
    path = tmp_path / "logs.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_final_look_is_taken_once_when_the_planned_units_are_in(
    demo_db: Path, tmp_path: Path
) -> None:
    settings = Settings.from_env({"PROMPTLAB_DB": str(demo_db), "PROMPTLAB_AUTHOR": "ana"})
    with Workbench.open(settings) as wb:
        wb.analysis.import_logs(_logs(tmp_path, units=300))
        a, b = REFS
        assert wb.analysis.decisions.get(a, b) is None
        with pytest.raises(PromptlabError, match="planned 1,000 units per arm .* has 300"):
            wb.analysis.decisions.decide(a, b, planned_units=1_000)
        assert wb.analysis.decisions.get(a, b) is None

        decided = wb.analysis.decisions.decide(a, b, planned_units=300)
        final = wb.analysis.compare_versions(a, b, logs=True, sequential=False, planned_units=300)
        assert decided.record.decided_by == "ana"
        assert (decided.record.units_a, decided.record.units_b) == (300, 300)
        stored = wb.analysis.decisions.get(a, b)
        assert stored is not None
        # The stored look is the final look's table, row for row.
        assert stored.comparison.rows == final.rows
        assert stored.comparison.family_size == final.family_size == 5
        assert stored.comparison.arms == final.arms
        assert "ana" in stored.line and "planned 300 per arm" in stored.line

        with pytest.raises(
            PromptlabError, match="was decided on .* by ana: a final look is taken once"
        ):
            wb.analysis.decisions.decide(a, b, planned_units=300)
        events = wb.audit.events(AuditFilter(kind="comparison.decided"))
        assert len(events) == 1 and events[0].actor == "ana"
        assert {row["metric"] for row in events[0].payload["rows"]} >= {"completion rate", "CTR"}
