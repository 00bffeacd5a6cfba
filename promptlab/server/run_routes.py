"""The API's routes for runs: the list, submits (a spec, or a request file as written),
and one run's status, cancel, pause, resume and a request file's output.

A submit with an Idempotency-Key answers a retry with the run it already started
(answers.py); only an admin's spec or request file may name files outside the data
folder.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Header, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask

from promptlab.records import RunWithCounts
from promptlab.server.answers import Submits, request_once, typed_response
from promptlab.server.principals import principal_of
from promptlab.server.refusals import Refused
from promptlab.server.roles import ADMIN
from promptlab.store.idempotency import IdempotencyKeys
from promptlab.workbench import Workbench


class SpecIn(BaseModel):
    """A run spec as data (what a spec file holds), with the folder its paths are from."""

    spec: dict[str, Any]
    base_dir: str | None = Field(None, description="Relative paths in the spec are from here.")
    default_name: str = Field("run", description="The run's name when the spec has none.")


class BatchIn(BaseModel):
    """A request file run as written (`promptlab batch`)."""

    requests: str
    endpoint: str | None = None
    model: str | None = None
    id_field: str = "custom_id"
    settings: dict[str, Any] = Field(default_factory=dict)


def add_submit_routes(app: FastAPI, wb: Workbench, auth: list[Any], local_paths: bool) -> None:
    """Runs: the list, and submits (a spec, or a request file as written)."""
    add_run_list_routes(app, wb, auth)
    submits: Submits[str] = Submits(str, IdempotencyKeys(wb.store))

    @app.post("/v1/runs", dependencies=auth, status_code=201)
    def submit_run(
        request: Request, body: SpecIn, idempotency_key: str | None = Header(None)
    ) -> dict[str, Any]:
        """Start a run from a spec; a retry with the same Idempotency-Key gets the same run.
        Only an admin's spec may name files outside the data folder."""
        own_files = local_paths and principal_of(request.scope).role == ADMIN

        def start() -> str:
            base = Path(body.base_dir) if body.base_dir and own_files else None
            root = None if own_files else wb.settings.data_dir
            spec = wb.runs.spec_from_data(
                body.spec, base_dir=base, default_name=body.default_name, dataset_root=root
            )
            return wb.runs.start(spec)

        return progress(wb, once(submits, request, idempotency_key, body, start))

    @app.post("/v1/batches", dependencies=auth, status_code=201)
    def submit_batch(
        request: Request, body: BatchIn, idempotency_key: str | None = Header(None)
    ) -> dict[str, Any]:
        """Run a request file as written (OpenAI Batch lines or chat bodies); the file is
        this machine's (an admin's), else it lies in the data folder. Endpoints only as
        the providers file configures them, or new ones keyless on loopback."""
        if not local_paths:
            raise Refused(403, "request files are run through a server on loopback only")
        requests = Path(body.requests)
        if principal_of(request.scope).role != ADMIN:
            requests = inside_data_dir(wb, requests)

        def start() -> str:
            spec = wb.runs.batch_spec(
                requests,
                body.endpoint,
                body.model,
                body.id_field,
                body.settings,
                confined=True,
            )
            return wb.runs.start(spec)

        return progress(wb, once(submits, request, idempotency_key, body, start))


def add_run_list_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """The newest runs, as plain dicts or as records."""

    @app.get("/v1/runs", dependencies=auth)
    def list_runs(limit: int = 20) -> list[dict[str, Any]]:
        """The newest runs with their items per state."""
        return [
            {**_record(r.run), "items": dataclasses.asdict(r.items)}
            for r in wb.runs.list(min(max(limit, 1), 1000))
        ]

    @app.get("/v1/run-summaries", dependencies=auth)
    def run_summaries(limit: int = 20) -> Response:
        """The newest runs with their items per state, as records (`promptlab status`)."""
        listed = wb.runs.list(min(max(limit, 1), 1000))
        return typed_response(list[RunWithCounts], listed)


def add_run_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """One run: status, cancel, pause, resume, a request file's output."""

    @app.get("/v1/runs/{run_id}", dependencies=auth)
    def run_status(run_id: str, summary: bool = False) -> dict[str, Any]:
        """Live progress, with each limiter's state and a provider-batch run's batches
        (what a run command's progress shows); with `summary`, attempts, 429s, tokens,
        cost and wall time too."""
        out = progress(wb, run_id)
        out["batches"] = [dataclasses.asdict(chunk) for chunk in wb.runs.batches(run_id)]
        if summary:
            view = wb.runs.view(run_id)
            out["summary"] = dataclasses.asdict(view.summary)
            out["wall_time_s"] = view.wall_time_s
            out["batch"] = wb.runs.is_batch(run_id)
        return out

    @app.post("/v1/runs/{run_id}/cancel", dependencies=auth)
    def cancel_run(run_id: str) -> dict[str, Any]:
        """Stop dispatching; requests in flight finish."""
        wb.runs.cancel(run_id)
        return progress(wb, run_id)

    @app.post("/v1/runs/{run_id}/pause", dependencies=auth)
    def pause_run(run_id: str) -> dict[str, Any]:
        """Stop dispatching; requests in flight finish, pending items wait for resume."""
        wb.runs.pause(run_id)
        return progress(wb, run_id)

    @app.post("/v1/runs/{run_id}/resume", dependencies=auth)
    def resume_run(run_id: str) -> dict[str, Any]:
        """Continue an interrupted, cancelled or stopped run; finished items are kept."""
        return progress(wb, wb.runs.resume(run_id))

    @app.get("/v1/runs/{run_id}/batch-output", dependencies=auth)
    def batch_output(run_id: str) -> FileResponse:
        """A request-file run's results in the OpenAI Batch output format (JSON Lines)."""
        handle = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False)  # noqa: SIM115
        handle.close()
        path = Path(handle.name)
        try:
            wb.runs.write_batch_output(run_id, path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return FileResponse(
            path,
            media_type="application/x-ndjson",
            background=BackgroundTask(path.unlink, missing_ok=True),
        )


def once(
    submits: Submits[str],
    request: Request,
    key: str | None,
    body: BaseModel,
    start: Callable[[], str],
) -> str:
    """`start()` once per caller, route and key (Submits), bound to the body."""
    return request_once(submits, request, key, body.model_dump_json(), start)


def inside_data_dir(wb: Workbench, path: Path) -> Path:
    """`path` (relative: from the data folder), refused unless it lies there."""
    root = wb.settings.data_dir.resolve()
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root):
        raise Refused(403, f"{path}: outside the data folder {root} (only an admin's may be)")
    return resolved


def progress(wb: Workbench, run_id: str) -> dict[str, Any]:
    """The run's live progress as JSON-able data."""
    # asdict turns the nested limiter states into dicts too.
    return dataclasses.asdict(wb.runs.progress(run_id))


def _record(run: Any) -> dict[str, Any]:
    data = dataclasses.asdict(run)
    data.pop("spec", None)  # large, and the client has it
    return data
