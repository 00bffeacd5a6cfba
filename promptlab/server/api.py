"""The HTTP JSON API of `promptlab serve` over one Workbench (FastAPI on uvicorn).

Every route but the OpenAPI description wants `Authorization: Bearer TOKEN`: the
owner's token or one `promptlab token create` made; each route needs a role
(promptlab/server/roles.py) and runs acting as the token's principal. Errors
are the CLI's one-line messages as `{"error": "..."}` with a status code (400, 404,
409, 413, 422), never a stack trace. Route handlers that touch the database are plain
functions (FastAPI runs them on its thread pool, as the app's sessions share one
workbench); `/v1/assign` answers from experiment configs held in memory.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Header, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from promptlab.audit.report import VerifyReport
from promptlab.errors import (
    ConfigError,
    EngineError,
    ExperimentError,
    NotFoundError,
    PromptlabError,
    RunNotFoundError,
    SpecError,
    StaleChangeError,
    TemplateError,
)
from promptlab.experiments import assign, config_from_mapping
from promptlab.experiments.config import ExperimentConfig
from promptlab.records import RunWithCounts
from promptlab.server.analysis_routes import add_analysis_routes
from promptlab.server.answers import (
    Submits,
    request_once,
    typed_response,
)
from promptlab.server.data_routes import UPLOAD_PATHS, add_data_routes
from promptlab.server.dataset_routes import add_dataset_routes
from promptlab.server.experiment_routes import add_experiment_routes
from promptlab.server.job_routes import add_job_routes
from promptlab.server.jobs import Jobs
from promptlab.server.metrics import metrics_response
from promptlab.server.principals import Guard, principal_of
from promptlab.server.prompt_routes import add_prompt_routes
from promptlab.server.refusals import Refused, error_response
from promptlab.server.review_routes import add_review_routes
from promptlab.server.roles import ADMIN, document_roles
from promptlab.server.schedule_routes import add_schedule_routes
from promptlab.server.token_routes import add_token_routes
from promptlab.server.uploads import MAX_UPLOAD_BYTES, UploadTooLarge
from promptlab.workbench import Workbench

log = logging.getLogger(__name__)

#: Largest request body accepted (a spec, a batch of units): bigger is a 413.
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Methods whose JSON bodies must say their length (so the bound holds before reading).
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: Most units one /v1/assign call may ask for.
MAX_ASSIGN_UNITS = 10_000
#: Seconds an experiment's config is served from memory before it is read again. A
#: change made through this process replaces it at once (Experiments.on_change); this
#: bounds how long one made by another process (a CLI on its own copy, a restore) waits.
CONFIG_TTL_S = 1.0


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


class ExperimentRunIn(BaseModel):
    """`promptlab experiment run NAME` as data: the dataset and the run's options."""

    dataset: str
    mode: str | None = None
    unit_column: str | None = None
    repeats: int = 1
    limit_rows: int | None = None
    skip_invalid_rows: bool = False
    estimate_only: bool = False
    executor: str | None = Field(None, description="`celery`: the calls go through workers.")


class AssignIn(BaseModel):
    """One unit (`unit_id`) or many (`unit_ids`) of an experiment."""

    experiment: str
    unit_id: str | None = None
    unit_ids: list[str] | None = None


def create_app(wb: Workbench, token: str, *, local_paths: bool = True) -> FastAPI:
    """The API over `wb`. With `local_paths` (a loopback server: its clients are on this
    machine) specs may name any file and request files may set endpoints; otherwise
    datasets must lie in the data folder, as for the app."""
    app = FastAPI(
        title="promptlab",
        version="1",
        description="promptlab's server: runs, experiments, audit and metrics of one database.",
        docs_url=None,
        redoc_url=None,
    )

    # Who calls is settled by the guard (principals.py); routes need no dependency.
    auth: list[Any] = []

    app.add_middleware(_BoundedBodies)
    app.add_middleware(Guard, wb=wb, owner_token=token, routes=lambda: app.router.routes)

    @app.exception_handler(Refused)
    async def refused(_request: Request, exc: Refused) -> Response:
        return error_response(exc.status, exc.message)

    @app.exception_handler(UploadTooLarge)
    async def too_large(_request: Request, exc: UploadTooLarge) -> Response:
        return error_response(413, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        # Unknown routes, wrong methods, bodies that are not JSON: the same one line.
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(UnicodeError)
    async def not_unicode(_request: Request, exc: UnicodeError) -> Response:
        return error_response(422, "text that is not valid Unicode (a lone surrogate, say)")

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return error_response(422, f"{where or 'request'}: {first.get('msg', 'invalid')}")

    @app.exception_handler(PromptlabError)
    async def promptlab_error(_request: Request, exc: PromptlabError) -> Response:
        return error_response(_status_of(exc), str(exc), type(exc).__name__)

    @app.get("/v1/health", dependencies=auth)
    async def health() -> dict[str, Any]:
        """Alive, and which database it owns."""
        return {"ok": True, "database": str(wb.settings.db_path)}

    @app.get("/metrics", dependencies=auth)
    def metrics() -> Response:
        """Prometheus text format: runs, items, attempts, limiters, latency (metrics.py)."""
        body, content_type = metrics_response(wb)
        return Response(body, media_type=content_type)

    _submit_routes(app, wb, auth, local_paths)
    _run_routes(app, wb, auth)
    _service_routes(app, wb, auth)
    add_data_routes(app, wb, auth)
    add_analysis_routes(app, wb)
    add_dataset_routes(app, wb)
    add_experiment_routes(app, wb)
    app.state.workbench = wb
    add_token_routes(app)
    app.state.jobs = Jobs()
    add_job_routes(app, wb, app.state.jobs)
    add_review_routes(app, wb)
    add_schedule_routes(app, wb, local_paths=local_paths)
    add_prompt_routes(app, wb)
    document_roles(app)
    return app


def _submit_routes(app: FastAPI, wb: Workbench, auth: list[Any], local_paths: bool) -> None:
    """Runs: the list, and submits (a spec, or a request file as written)."""
    submits: Submits[str] = Submits()

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

        return _progress(wb, _once(submits, request, idempotency_key, body, start))

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
                requests, body.endpoint, body.model, body.id_field, body.settings,
                confined=True,
            )  # fmt: skip
            return wb.runs.start(spec)

        return _progress(wb, _once(submits, request, idempotency_key, body, start))


def _once(
    submits: Submits[str], request: Request, key: str | None, body: BaseModel,
    start: Callable[[], str],
) -> str:  # fmt: skip
    """`start()` once per caller, route and key (Submits), bound to the body."""
    return request_once(submits, request, key, body.model_dump_json(), start)


def inside_data_dir(wb: Workbench, path: Path) -> Path:
    """`path` (relative: from the data folder), refused unless it lies there."""
    root = wb.settings.data_dir.resolve()
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root):
        raise Refused(403, f"{path}: outside the data folder {root} (only an admin's may be)")
    return resolved


def _run_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """One run: status, cancel, pause, resume, a request file's output."""

    @app.get("/v1/runs/{run_id}", dependencies=auth)
    def run_status(run_id: str, summary: bool = False) -> dict[str, Any]:
        """Live progress; with `summary`, attempts, 429s, tokens, cost and wall time too."""
        out = _progress(wb, run_id)
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
        return _progress(wb, run_id)

    @app.post("/v1/runs/{run_id}/pause", dependencies=auth)
    def pause_run(run_id: str) -> dict[str, Any]:
        """Stop dispatching; requests in flight finish, pending items wait for resume."""
        wb.runs.pause(run_id)
        return _progress(wb, run_id)

    @app.post("/v1/runs/{run_id}/resume", dependencies=auth)
    def resume_run(run_id: str) -> dict[str, Any]:
        """Continue an interrupted, cancelled or stopped run; finished items are kept."""
        return _progress(wb, wb.runs.resume(run_id))

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


def _service_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """What services and monitors ask for: assignment, experiments, audit."""
    configs = _ConfigCache(wb)
    submits: Submits[str] = Submits()

    @app.post(
        "/v1/assign",
        dependencies=auth,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": AssignIn.model_json_schema()}},
            }
        },
    )
    async def assign_units(request: Request) -> Response:
        """Variants for units, from the experiment's config held in memory (no database):
        `{"experiment", "revision", "assignments": [{unit, variant, bucket,
        prompt_version_id, in_experiment, reason}, ...]}`."""
        # The body is read by hand (AssignIn documents it): this is the route services
        # call per request, and model validation was a third of its time.
        experiment, units = _assign_body(await request.body())
        config = configs.fresh(experiment)
        if config is None:
            config = await run_in_threadpool(configs.load, experiment)
        answers = [assign(config, unit)._asdict() for unit in units]
        answer = {"experiment": config.name, "revision": config.revision, "assignments": answers}
        # orjson straight to bytes: FastAPI's encoder walks every value first (4x slower).
        return Response(orjson.dumps(answer), media_type="application/json")

    @app.post("/v1/experiments/{name}/runs", dependencies=auth, status_code=201)
    def run_experiment(
        request: Request, name: str, body: ExperimentRunIn,
        idempotency_key: str | None = Header(None),
    ) -> dict[str, Any]:  # fmt: skip
        """The experiment's latest revision on an imported dataset: its estimate (lines,
        as the CLI prints them) and, unless `estimate_only`, the started run."""
        from promptlab.views.estimate import estimate_lines

        spec = wb.runs.experiment_spec(
            name, body.dataset, mode=body.mode, unit_column=body.unit_column,
            repeats=body.repeats, limit_rows=body.limit_rows,
            skip_invalid_rows=body.skip_invalid_rows, executor=body.executor,
        )  # fmt: skip
        estimate = list(estimate_lines(wb.runs.estimate(spec)))
        if body.estimate_only:
            return {"estimate": estimate, "run": None}
        run_id = _once(submits, request, idempotency_key, body, lambda: wb.runs.start(spec))
        return {"estimate": estimate, "run": _progress(wb, run_id)}

    @app.get("/v1/experiments/{name}", dependencies=auth)
    def experiment(name: str) -> dict[str, Any]:
        """The experiment's current revision, as exported (what services assign from)."""
        return wb.experiments.get(name).to_dict()

    @app.get("/v1/audit/verify", dependencies=auth)
    def audit_verify() -> Response:
        """Check every chain of the audit trail and every run's rows (a VerifyReport)."""
        return typed_response(VerifyReport, wb.audit.verify())


def _assign_body(raw: bytes) -> tuple[str, list[str]]:
    """(experiment, units) of an /v1/assign body, or a 422 naming the field."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Refused(422, "body: not JSON") from None
    if not isinstance(data, dict):
        raise Refused(422, "body: expected an object")
    experiment = data.get("experiment")
    if not isinstance(experiment, str) or not experiment:
        raise Refused(422, "experiment: Field required")
    one, many = data.get("unit_id"), data.get("unit_ids")
    units = [one] if one is not None else many
    if not isinstance(units, list) or not 0 < len(units) <= MAX_ASSIGN_UNITS:
        raise Refused(422, f"give unit_id or 1 to {MAX_ASSIGN_UNITS:,} unit_ids")
    if not all(isinstance(unit, str) for unit in units):
        raise Refused(422, "unit_id, unit_ids: expected strings")
    return experiment, units


class _BoundedBodies:
    """Refuse a body over its bound from its Content-Length, before it is read: JSON
    bodies MAX_BODY_BYTES, uploads (streamed to disk, counted again while read)
    MAX_UPLOAD_BYTES. A pure ASGI middleware: Starlette's BaseHTTPMiddleware costs a
    task per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            upload = scope["path"] in UPLOAD_PATHS
            bound = MAX_UPLOAD_BYTES if upload else MAX_BODY_BYTES
            refusal = None
            if length is not None and (not length.isdigit() or int(length) > bound):
                refusal = error_response(413, f"request body over {bound:,} bytes")
            elif scope["method"] in BODY_METHODS and length is None and not upload:
                refusal = error_response(411, "send a Content-Length (bodies are bounded)")
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _status_of(exc: PromptlabError) -> int:
    if isinstance(exc, NotFoundError | RunNotFoundError):
        return 404
    if isinstance(exc, StaleChangeError) or (
        isinstance(exc, EngineError) and "already running" in str(exc)
    ):
        return 409
    if isinstance(exc, SpecError | ConfigError | TemplateError | ExperimentError):
        return 422
    return 400


def _record(run: Any) -> dict[str, Any]:
    data = dataclasses.asdict(run)
    data.pop("spec", None)  # large, and the client has it
    return data


def _progress(wb: Workbench, run_id: str) -> dict[str, Any]:
    # asdict turns the nested limiter states into dicts too.
    return dataclasses.asdict(wb.runs.progress(run_id))


class _ConfigCache:
    """Experiment configs by name, read from the store at most every CONFIG_TTL_S."""

    def __init__(self, wb: Workbench) -> None:
        self._wb = wb
        self._configs: dict[str, tuple[float, ExperimentConfig]] = {}
        self._loading = threading.Lock()
        wb.experiments.on_change(self._changed)

    def _changed(self, config: ExperimentConfig) -> None:
        # The new revision, parsed from its exported form, as `load` would read it.
        self._configs[config.name] = (time.monotonic(), config_from_mapping(config.to_dict()))

    def fresh(self, name: str) -> ExperimentConfig | None:
        held = self._configs.get(name)
        if held is None or time.monotonic() - held[0] > CONFIG_TTL_S:
            return None
        return held[1]

    def load(self, name: str) -> ExperimentConfig:
        # One read at a time: the requests that found it stale together wait for the
        # first one's read instead of each reading the store (p99 jumped at every TTL).
        with self._loading:
            held = self.fresh(name)
            if held is not None:
                return held
            # Parsed from its exported form: what a service holding the file assigns by.
            config = config_from_mapping(self._wb.experiments.get(name).to_dict())
            self._configs[name] = (time.monotonic(), config)
            return config
