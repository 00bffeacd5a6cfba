"""`/v1/jobs/...`: exports as jobs (server/jobs.py): start one, ask its state, fetch
its file. The CLI's `export` and `review export` use them through a server; imports
(`POST /v1/datasets`, `/v1/feedback`, `/v1/logs`, `/v1/exposures`) answer with their job
too, its result what the importer answered."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from promptlab.server.answers import typed_response
from promptlab.server.fairness import Fairness
from promptlab.server.jobs import MAX_WAIT_S, Job, Jobs
from promptlab.server.principals import principal_of
from promptlab.workbench import Workbench


class ItemFilterIn(BaseModel):
    """The Runs page's item filters (records/items.py ItemFilter)."""

    status: str | None = Field(default=None, max_length=40)
    variant: str | None = Field(default=None, max_length=200)
    error_kind: str | None = Field(default=None, max_length=80)
    check: str | None = Field(default=None, max_length=40)
    search: str | None = Field(default=None, max_length=500)


class TableExportIn(BaseModel):
    """`promptlab export` as data: a table, a format, its filters."""

    table: str
    format: str = "csv"
    run_id: str | None = None
    experiment: str | None = None
    prompt: str | None = None
    items: ItemFilterIn = Field(
        default_factory=ItemFilterIn,
        description="With run_id: the items the Runs page's filters keep (and their rows).",
    )
    raw: bool = Field(False, description="CSV cells exactly as stored (for a program).")


class ReviewExportIn(BaseModel):
    """`promptlab review export` as data; `file_name` is the client's (its suffix says
    .jsonl or .csv, and the audit trail names it)."""

    file_name: str
    run_id: str | None = None
    column: str = "expected"
    raw: bool = False


def _job(job: Job, status: int = 200) -> Response:
    return typed_response(Job, job, status)


def _owner(request: Request) -> str:
    return principal_of(request.scope).token_id


def add_job_routes(app: FastAPI, wb: Workbench, jobs: Jobs, fairness: Fairness) -> None:
    add_export_job_routes(app, wb, jobs)
    add_job_state_routes(app, jobs, fairness)
    add_backup_route(app, wb, jobs)


def add_export_job_routes(app: FastAPI, wb: Workbench, jobs: Jobs) -> None:
    """Start an export of a table or of the settled review answers."""

    @app.post("/v1/jobs/table-exports", status_code=202)
    def export_table(request: Request, body: TableExportIn) -> Response:
        """Write a table to a file, as a job (`GET /v1/jobs/{id}`, then `/file`)."""
        from promptlab.data.export import ExportFilters, check_format, check_items, check_table
        from promptlab.records.items import ItemFilter

        table, fmt = check_table(body.table), check_format(body.format)  # refused now
        items = ItemFilter(**body.items.model_dump())
        check_items(table, ExportFilters(body.run_id, body.experiment, body.prompt, items))

        def write(path: Path) -> int:
            return wb.exports.write_table(
                table,
                fmt,
                path,
                run_id=body.run_id,
                experiment=body.experiment,
                prompt=body.prompt,
                items=items,
                raw=body.raw,
            )

        return _job(jobs.start(_owner(request), "table-export", f"{table}.{fmt}", write), 202)

    @app.post("/v1/jobs/review-exports", status_code=202)
    def export_review(request: Request, body: ReviewExportIn) -> Response:
        """Write the settled review answers as a dataset file, as a job."""
        wb.review.check_export_name(body.file_name)  # refused now
        suffix = Path(body.file_name).suffix.lower()

        def write(path: Path) -> int:
            return wb.review.export(
                path,
                run_id=body.run_id,
                column=body.column,
                raw=body.raw,
                recorded_as=body.file_name,
            )

        return _job(jobs.start(_owner(request), "review-export", f"review{suffix}", write), 202)


def add_job_state_routes(app: FastAPI, jobs: Jobs, fairness: Fairness) -> None:
    """Any job's state, and its file once completed."""

    @app.get("/v1/jobs/{job_id}")
    async def job_state(
        request: Request, job_id: str, wait: float = Query(0.0, ge=0, le=MAX_WAIT_S)
    ) -> Response:
        """The job's state: running, completed (with its rows, or an import's result)
        or failed (with why); with `wait`, answered once the job has ended or after that
        many seconds (a long poll, awaited without a thread; a token may hold
        fairness.MAX_LONG_POLLS at once, more are a 429)."""
        who = _owner(request)
        if wait <= 0:
            return _job(jobs.get(who, job_id))
        release = fairness.long_poll(who)
        try:
            return _job(await jobs.wait(who, job_id, wait))
        finally:
            release()

    @app.get("/v1/jobs/{job_id}/file")
    def job_file(request: Request, job_id: str) -> FileResponse:
        """The completed job's file."""
        return FileResponse(jobs.file(_owner(request), job_id))


def add_backup_route(app: FastAPI, wb: Workbench, jobs: Jobs) -> None:
    @app.post("/v1/jobs/backups", status_code=202)
    def backup(request: Request) -> Response:
        """A consistent copy of the whole database as it stands, as a job's file (the
        job's `rows` is its size in bytes): what `promptlab backup` writes (admin)."""
        who = principal_of(request.scope).token_id
        return _job(jobs.start(who, "backup", "backup.duckdb", wb.backup), 202)
