"""`/v1/schedules`: run specs submitted on a cron schedule (`promptlab schedule ...`).

Answers are ScheduleRecords (server/typed.py), so the CLI prints them as it does on its
own. Only an admin's spec may name files outside the data folder, as for `/v1/runs`."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import BaseModel, Field

from promptlab.records import ScheduleRecord
from promptlab.server.answers import typed_response
from promptlab.server.principals import principal_of
from promptlab.server.roles import ADMIN
from promptlab.workbench import Workbench


class ScheduleIn(BaseModel):
    """A run spec with `schedule:`, as data, and the folder its paths are from."""

    spec: dict[str, Any]
    base_dir: str | None = Field(None, description="Relative paths in the spec are from here.")
    default_name: str = Field("schedule", description="Its name when the spec has none.")


def _record(record: ScheduleRecord) -> Response:
    return typed_response(ScheduleRecord, record)


def add_schedule_routes(app: FastAPI, wb: Workbench, *, local_paths: bool) -> None:
    @app.get("/v1/schedules")
    def list_schedules() -> Response:
        """Every schedule: cron, state, next time, last run and how it ended."""
        return typed_response(list[ScheduleRecord], wb.schedules.list())

    @app.post("/v1/schedules", status_code=201)
    def add_schedule(request: Request, body: ScheduleIn) -> Response:
        """Add (or replace, by its name) the schedule of a spec with `schedule:`."""
        from pathlib import Path

        own_files = local_paths and principal_of(request.scope).role == ADMIN
        spec = wb.runs.spec_from_data(
            body.spec,
            default_name=body.default_name,
            base_dir=Path(body.base_dir) if body.base_dir and own_files else None,
            dataset_root=None if own_files else wb.settings.data_dir,
        )
        return _record(wb.schedules.add(spec))

    @app.post("/v1/schedules/{name}/pause")
    def pause_schedule(name: str) -> Response:
        """Stop submitting its runs (runs already going go on)."""
        return _record(wb.schedules.pause(name))

    @app.post("/v1/schedules/{name}/resume")
    def resume_schedule(name: str) -> Response:
        """Submit it again, from its next time after now."""
        return _record(wb.schedules.resume(name))

    @app.delete("/v1/schedules/{name}")
    def remove_schedule(name: str) -> dict[str, str]:
        """Remove it (its runs stay)."""
        wb.schedules.remove(name)
        return {"removed": name}
