"""What a run's end set going (promptlab/evaluation/ended.py): one record per piece of work."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class AfterRunState(StrEnum):
    #: A judge's or validation's run is claimed and being started, or is running.
    STARTING = "starting"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class AfterRunRecord:
    """One piece of a run's after-run work: `scores`, `alerts`, `judge NAME`,
    `crosscheck` (decisions and the review queue), `crosscheck validation`, or for a
    judge's own run `verdicts`."""

    run_id: str
    work: str
    state: str
    #: Why it failed, in one line (None otherwise).
    detail: str | None
    #: The run it started (a judge's, a validation's), once started.
    child_run_id: str | None
    updated_at: datetime

    @property
    def failed(self) -> bool:
        return self.state == AfterRunState.FAILED

    @property
    def line(self) -> str:
        """`judge graded: failed (why)`, `scores: done`, `judge graded: running (run_x)`."""
        said = f"{self.work}: {self.state}"
        if self.child_run_id and self.state != AfterRunState.FAILED:
            said += f" ({self.child_run_id})"
        return said + (f" ({self.detail})" if self.detail else "")


def failure_lines(records: Sequence[AfterRunRecord]) -> list[str]:
    """The failed pieces, one line each (what the status line, the Runs page and
    `promptlab metrics` show)."""
    return [r.line for r in records if r.failed]
