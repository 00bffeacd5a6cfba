"""A schedule: a run spec submitted whenever its cron expression falls due."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class ScheduleRecord:
    name: str
    #: Five cron fields or an @alias, in UTC (promptlab/schedules/cron.py).
    cron: str
    #: The run spec as stored with a run, without its `schedule`.
    spec: Mapping[str, Any]
    paused: bool
    #: When it is next submitted (None while paused).
    next_at: datetime | None
    last_at: datetime | None
    last_run_id: str | None
    #: Why the last firing submitted no run (the spec no longer checks out).
    last_error: str | None
    author: str
    created_at: datetime
    updated_at: datetime
    #: How the last run it submitted stands now (None: it has submitted none).
    last_status: str | None = None

    @property
    def after(self) -> tuple[str, ...]:
        names = self.spec.get("after") or ()
        return (names,) if isinstance(names, str) else tuple(names)
