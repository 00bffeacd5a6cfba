"""The API's routes for what the workbench holds besides runs: prompts and versions,
datasets, feedback and logs, metrics and comparisons, exports and the audit trail.

Uploads (datasets, feedback, logs) are the file as the request body, streamed to disk
(promptlab/server/uploads.py) with its name in `?filename=` (the extension says the
format); exports stream a file written on disk. Everything else is JSON.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask

from promptlab.analysis.compare import Comparison
from promptlab.audit.chain import AuditEvent, AuditTrace
from promptlab.prompts.templates import Template
from promptlab.records import DatasetInfo
from promptlab.records.datasets import DEFAULT_CONVERSATION, Conversation
from promptlab.records.items import ItemFilter
from promptlab.records.metrics import MetricsRow
from promptlab.records.prompts import PromptVersion
from promptlab.server.answers import (
    Submits,
    json_response,
    typed_response,
)
from promptlab.server.jobs import Job
from promptlab.server.refusals import Refused
from promptlab.server.typed import wire_data
from promptlab.server.uploads import import_job
from promptlab.store.audit import AuditFilter
from promptlab.workbench import Workbench

#: Routes whose bodies are files, bounded by the upload cap instead of the JSON one.
UPLOAD_PATHS = ("/v1/datasets", "/v1/feedback", "/v1/logs", "/v1/exposures")
#: Export formats and the media type each is served as.
EXPORT_MEDIA = {
    "csv": "text/csv",
    "jsonl": "application/x-ndjson",
    "parquet": "application/vnd.apache.parquet",
}
#: Most audit events one call returns.
MAX_EVENTS = 10_000


class VersionIn(BaseModel):
    """A template as data (what a prompt file's version holds), and its commit message."""

    messages: list[dict[str, Any]] = Field(max_length=1000)
    params: dict[str, Any] = Field(default_factory=dict)
    variables: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    rules: list[dict[str, Any]] = Field(default_factory=list)
    drift_threshold: float | None = Field(None, description="See the prompt file's field.")
    message: str = ""
    version: str | None = Field(None, description="An explicit semver; else the bump says.")


class LabelIn(BaseModel):
    ref: str = Field(description="The version the label moves to: a semver, id or label.")
    expected: str | None = Field(
        None,
        description="The version the mover saw the label point at (a semver or id; "
        "`none`: no such label). A move on what has changed since is refused (409) naming "
        "who moved the label and when; left out, the label moves whatever it points at.",
    )


def add_data_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    _prompt_routes(app, wb, auth)
    _dataset_routes(app, wb, auth)
    _feedback_routes(app, wb, auth)
    _comparison_routes(app, wb, auth)
    _export_routes(app, wb, auth)
    _audit_routes(app, wb, auth)


def _prompt_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    @app.get("/v1/prompts/{name}/versions", dependencies=auth)
    def versions(name: str) -> Response:
        """Every version of the prompt, newest first, with its template and labels."""
        labels = wb.prompts.labels(name)
        return json_response(
            [
                {**_version(v), "labels": sorted(k for k, at in labels.items() if at.id == v.id)}
                for v in wb.prompts.versions(name)
            ]
        )

    @app.post("/v1/prompts/{name}/versions", dependencies=auth, status_code=201)
    def save_version(name: str, body: VersionIn) -> Response:
        """A new version of an existing prompt (or nothing, when the template is the
        latest's): `{"created", "bump", "version"}`."""
        template = Template.build(
            body.messages,
            body.params,
            body.variables,
            body.output_schema,
            body.rules,
            body.drift_threshold,
        )
        result = wb.prompts.save_version(name, template, message=body.message, version=body.version)
        answer = {
            "created": result.created,
            "bump": result.bump,
            "version": _version(result.version),
        }
        return json_response(answer, 201 if result.created else 200)

    @app.put("/v1/prompts/{name}/labels/{label}", dependencies=auth)
    def set_label(name: str, label: str, body: LabelIn) -> Response:
        """Move a label (production, staging...) to a version: the PromptVersion it
        points at now (server/typed.py)."""
        moved = wb.prompts.set_label(name, body.ref, label, expected=body.expected)
        return typed_response(PromptVersion, moved)


def _dataset_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    # One cache per route: a key reused on another route is another request.
    dataset_imports: Submits[Job] = Submits()

    @app.get("/v1/datasets", dependencies=auth)
    def datasets() -> Response:
        """Every imported dataset: name, rows, columns, unit column, who imported it."""
        return json_response(wb.datasets.list())

    @app.get("/v1/datasets/{name}", dependencies=auth)
    def dataset(name: str, limit: int = 20) -> Response:
        """The dataset and its first rows (key-shaped cells masked)."""
        info = wb.datasets.get(name)
        return json_response({"dataset": info, "rows": wb.datasets.preview(name, _clamp(limit))})

    @app.post("/v1/datasets", dependencies=auth, status_code=201)
    async def import_dataset(
        request: Request,
        name: str,
        filename: str,
        unit_column: str | None = None,
        replace: bool = False,
        format: str | None = None,  # noqa: A002 (the query parameter's name)
        session_column: str | None = None,
        order_column: str | None = None,
        role_column: str | None = None,
        content_column: str | None = None,
        idempotency_key: str | None = Header(None),
    ) -> Response:
        """The body is the file (CSV, JSON Lines or Parquet by `filename`'s extension,
        or `format`), streamed to disk and imported as `name` (a DatasetInfo); with any
        of the `*_column`s, as a conversation log (the others their defaults)."""
        log = _conversation(session_column, order_column, role_column, content_column)

        def imported(path: Path) -> Any:
            info = wb.datasets.import_file(
                path,
                name,
                fmt=format,
                unit_column=unit_column,
                replace=replace,
                conversation=log,
                source=filename,
            )
            return wire_data(DatasetInfo, info)

        job = await import_job(
            request, filename, dataset_imports, idempotency_key, "dataset-import", imported
        )
        return typed_response(Job, job, 202)


def _feedback_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """Feedback and production logs imported, each as a job."""
    # One cache per route: a key reused on another route is another request.
    feedback_imports: Submits[Job] = Submits()
    log_imports: Submits[Job] = Submits()

    @app.post("/v1/feedback", dependencies=auth)
    async def import_feedback(
        request: Request, filename: str, idempotency_key: str | None = Header(None)
    ) -> Response:
        """The body is a feedback file (CSV, JSON Lines, Parquet), imported as a job
        whose result is `{"rows": N}`."""
        job = await import_job(
            request,
            filename,
            feedback_imports,
            idempotency_key,
            "feedback-import",
            lambda path: {"rows": wb.analysis.import_feedback(path)},
        )
        return typed_response(Job, job, 202)

    @app.post("/v1/logs", dependencies=auth)
    async def import_logs(
        request: Request,
        filename: str,
        column: Annotated[list[str] | None, Query()] = None,
        idempotency_key: str | None = Header(None),
    ) -> Response:
        """The body is a production log; each `column=FIELD:COLUMN` maps a field
        (version, unit_id, latency_ms, clicked, completed, event_time) to the file's."""
        columns = dict(_pair(c) for c in column or ())
        job = await import_job(
            request,
            filename,
            log_imports,
            idempotency_key,
            "log-import",
            lambda path: {"rows": wb.analysis.import_logs(path, columns)},
        )
        return typed_response(Job, job, 202)


def _comparison_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """Metrics per variant or version, and comparisons of variants or versions."""

    @app.get("/v1/analysis/metrics", dependencies=auth)
    def metrics(
        run_id: str | None = None, prompt: str | None = None, since: str | None = None
    ) -> Response:
        """Per variant of a run, or per version and model across runs: completion,
        failures, latency percentiles, tokens, cost, CTR (MetricsRows, server/typed.py)."""
        return typed_response(list[MetricsRow], wb.analysis.metrics(run_id, prompt, since))

    @app.get("/v1/runs/{run_id}/comparison", dependencies=auth)
    def comparison(
        run_id: str,
        a: str | None = None,
        b: str | None = None,
        sequential: bool | None = None,
        planned_units: Annotated[int | None, Query(ge=1)] = None,
        keep_shared: bool = False,
    ) -> Response:
        """Each variant against control (or `b` against `a`), per unit, with significance
        (a Comparison, server/typed.py); `keep_shared` keeps units seen in both arms."""
        compared = wb.analysis.compare(run_id, a, b, sequential, planned_units, keep_shared)
        return typed_response(Comparison, compared)

    @app.get("/v1/analysis/compare", dependencies=auth)
    def compare_versions(
        a: str,
        b: str,
        run_id: str | None = None,
        logs: bool = False,
        since: str | None = None,
        sequential: bool | None = None,
        cuped: bool = False,
        planned_units: Annotated[int | None, Query(ge=1)] = None,
        keep_shared: bool = False,
    ) -> Response:
        """Version `b` against `a` in one run, in production logs, or within the runs
        holding both (a Comparison); `cuped` with `logs` and `since`: the logs before
        `since` as covariate; `keep_shared` keeps units seen under both versions."""
        compared = wb.analysis.compare_versions(
            a,
            b,
            run_id=run_id,
            logs=logs,
            since=since,
            sequential=sequential,
            cuped=cuped,
            planned_units=planned_units,
            keep_shared=keep_shared,
        )
        return typed_response(Comparison, compared)


def _item_filter(
    status: Annotated[str | None, Query(max_length=40)] = None,
    variant: Annotated[str | None, Query(max_length=200)] = None,
    error_kind: Annotated[str | None, Query(max_length=80)] = None,
    check: Annotated[str | None, Query(max_length=40)] = None,
    search: Annotated[str | None, Query(max_length=500)] = None,
) -> ItemFilter:
    """The Runs page's item filters as an export's query parameters."""
    return ItemFilter(status, variant, error_kind, check, search)


def _export_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """A table as a file, written on disk and streamed from there."""

    @app.get("/v1/exports/{table}", dependencies=auth)
    def export(
        table: str,
        items: Annotated[ItemFilter, Depends(_item_filter)],
        format: str = "csv",  # noqa: A002 (the query parameter's name)
        run_id: str | None = None,
        experiment: str | None = None,
        prompt: str | None = None,
        raw: Annotated[
            bool,
            Query(
                description="CSV cells exactly as stored, formula-like text unquoted: for "
                "a program reading the file (values round-trip), not a spreadsheet."
            ),
        ] = False,
    ) -> FileResponse:
        """A table (items, results, attempts, metrics, comparisons, feedback) as a file,
        written on disk and streamed from there (secrets masked, as every export).
        In CSV, text cells beginning with =, +, -, @, a tab or a carriage return get a
        leading ' so a spreadsheet shows them instead of running them; `raw=true`
        writes them exactly, for a program rather than a spreadsheet. With `run_id`,
        `status`, `variant`, `error_kind`, `check` and `search` keep the items the Runs
        page's filters keep (and their results and attempts)."""
        if format not in EXPORT_MEDIA:
            raise Refused(422, f"format: one of {', '.join(EXPORT_MEDIA)}, not {format!r}")
        folder = Path(tempfile.mkdtemp(prefix="promptlab-export-"))
        path = folder / f"{table}.{format}"
        try:
            rows = wb.exports.write_table(
                table,
                format,
                path,
                run_id=run_id,
                experiment=experiment,
                prompt=prompt,
                items=items,
                raw=raw,
            )
        except BaseException:
            _remove(folder)
            raise
        return FileResponse(
            path,
            media_type=EXPORT_MEDIA[format],
            filename=path.name,
            headers={"X-Rows": str(rows)},  # the rows written (`promptlab export` says so)
            background=BackgroundTask(_remove, folder),
        )


def _audit_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    @app.get("/v1/audit/events", dependencies=auth)
    def events(
        kind: str | None = None,
        run_id: str | None = None,
        experiment: str | None = None,
        trace_id: str | None = None,
        chain: str | None = None,
        limit: int = 1000,
    ) -> Response:
        """Events matching every filter given, oldest first."""
        where = AuditFilter(
            run_id=run_id,
            experiment=experiment,
            kind=kind,
            trace_id=trace_id,
            chain=chain,
            limit=min(max(limit, 1), MAX_EVENTS),
        )
        return json_response([_event(e) for e in wb.audit.events(where)])

    @app.get("/v1/audit/traces/{trace}", dependencies=auth)
    def trace(trace: str) -> Response:
        """One item's trace (its trace id, or 8+ hex digits of it): every event in order."""
        return typed_response(AuditTrace, wb.audit.trace(trace))

    @app.get("/v1/audit/export", dependencies=auth)
    def export_events(run_id: str, file_name: str = "download") -> StreamingResponse:
        """A run's events as the JSON Lines `promptlab audit export` writes, streamed;
        recorded as exported to `file_name` (the client's) once all are sent."""
        where = AuditFilter(run_id=run_id, limit=None)
        lines = wb.audit.export_lines(where)

        def counted() -> Iterator[bytes]:
            rows = 0
            for line in lines:
                rows += 1
                yield line
            wb.audit.record_export(where, file_name, rows)

        return StreamingResponse(counted(), media_type="application/x-ndjson")


def _version(version: Any) -> dict[str, Any]:
    data = dataclasses.asdict(version)
    data["template"] = version.template.canonical()
    return data


def _event(event: AuditEvent) -> dict[str, Any]:
    data = dataclasses.asdict(event)
    data["payload"] = event.payload
    del data["payload_json"]
    return data


def _conversation(
    session: str | None, order: str | None, role: str | None, content: str | None
) -> Conversation | None:
    """A conversation log's columns when any is named (the others their defaults)."""
    given = {"session": session, "order": order, "role": role, "content": content}
    named = {k: v for k, v in given.items() if v}
    return Conversation(**{**DEFAULT_CONVERSATION.columns(), **named}) if named else None


def _pair(text: str) -> tuple[str, str]:
    field, sep, column = text.partition(":")
    if not sep or not field or not column:
        raise Refused(422, f"column: give FIELD:COLUMN, not {text!r}")
    return field, column


def _clamp(limit: int) -> int:
    return min(max(limit, 1), 1000)


def _remove(folder: Path) -> None:
    for path in folder.iterdir():
        path.unlink(missing_ok=True)
    folder.rmdir()
