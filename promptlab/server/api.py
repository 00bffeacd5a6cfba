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

import logging
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

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
from promptlab.server.access import AccessLog, access_lines_on
from promptlab.server.analysis_routes import add_analysis_routes
from promptlab.server.cache_routes import add_cache_routes
from promptlab.server.data_routes import UPLOAD_PATHS, add_data_routes
from promptlab.server.dataset_routes import add_dataset_routes
from promptlab.server.decision_routes import add_decision_routes
from promptlab.server.drift_routes import add_drift_routes
from promptlab.server.experiment_routes import add_experiment_routes
from promptlab.server.fairness import Fairness, TooMany
from promptlab.server.feedback_routes import add_feedback_event_routes
from promptlab.server.gateway_routes import GatewayDoor, Gateways, add_gateway_routes
from promptlab.server.job_routes import add_job_routes
from promptlab.server.jobs import Jobs
from promptlab.server.metrics import metrics_response
from promptlab.server.plugin_routes import add_plugin_routes
from promptlab.server.principals import OWNER_TOKEN_ID, Guard, principal_of
from promptlab.server.prompt_routes import add_prompt_routes
from promptlab.server.refusals import Refused, error_response, too_many_response
from promptlab.server.review_routes import add_review_routes
from promptlab.server.roles import ROUTE_ROLES, document_roles
from promptlab.server.rollout_routes import add_rollout_routes
from promptlab.server.run_routes import add_run_routes, add_submit_routes
from promptlab.server.schedule_routes import add_schedule_routes
from promptlab.server.service_routes import (
    ExperimentConfigs,
    add_assign_routes,
    add_service_routes,
)
from promptlab.server.token_routes import add_token_routes
from promptlab.server.uploads import MAX_UPLOAD_BYTES, UploadTooLarge
from promptlab.workbench import Workbench

log = logging.getLogger(__name__)

#: Largest request body accepted (a spec, a batch of units): bigger is a 413.
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Methods whose JSON bodies must say their length (so the bound holds before reading).
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


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

    # Each principal's share of the server (fairness.py): the guard counts requests, the
    # jobs count jobs and long polls.
    fairness = Fairness(OWNER_TOKEN_ID)
    configs = ExperimentConfigs(wb)
    # The live gateway (promptlab/gateway/): what applications call in production. Its
    # door answers inside the guard and the body bound, ahead of the router.
    app.state.gateways = Gateways(wb, configs.current)
    app.add_middleware(GatewayDoor, gateways=app.state.gateways)
    app.add_middleware(_BoundedBodies)
    roles = _guarded(app, wb, token, fairness)
    access_lines_on()
    app.add_middleware(AccessLog)  # outermost: a line for every answer, refusals too
    _add_error_answers(app)
    _add_health_routes(app, wb, auth)
    add_submit_routes(app, wb, auth, local_paths)
    add_run_routes(app, wb, auth)
    add_assign_routes(app, wb, auth, configs)
    add_gateway_routes(app, app.state.gateways, auth)
    add_service_routes(app, wb, auth)
    add_data_routes(app, wb, auth)
    add_feedback_event_routes(app, wb, auth, app.state.gateways.settle)
    add_rollout_routes(app, wb, auth)
    add_decision_routes(app, wb, auth)
    add_analysis_routes(app, wb)
    add_dataset_routes(app, wb)
    add_experiment_routes(app, wb)
    app.state.workbench = wb
    #: `serve --gateway-relay`'s relay (server/run.py sets it), read by /metrics.
    app.state.relay = None
    add_token_routes(app)
    app.state.jobs = Jobs(fairness)
    add_job_routes(app, wb, app.state.jobs, fairness)
    add_review_routes(app, wb)
    add_schedule_routes(app, wb, local_paths=local_paths)
    add_prompt_routes(app, wb)
    add_cache_routes(app, wb)
    add_drift_routes(app, wb)
    add_plugin_routes(app, roles)
    document_roles(app, roles)
    return app


def _guarded(app: FastAPI, wb: Workbench, token: str, fairness: Fairness) -> dict[Any, str]:
    """The guard in front of the routes (principals.py), and the role table it enforces:
    ROUTE_ROLES, and each plugin route's as it declares it (added with the routes)."""
    roles = dict(ROUTE_ROLES)
    routes = lambda: app.router.routes  # noqa: E731 - read at each request: routes come later
    app.add_middleware(
        Guard, wb=wb, owner_token=token, routes=routes, fairness=fairness, roles=roles
    )
    return roles


def _add_error_answers(app: FastAPI) -> None:
    """Every error as its one-line `{"error": ...}` answer with its status, never a trace."""

    @app.exception_handler(Refused)
    async def refused(_request: Request, exc: Refused) -> Response:
        return error_response(exc.status, exc.message)

    @app.exception_handler(TooMany)
    async def too_many(_request: Request, exc: TooMany) -> Response:
        return too_many_response(exc)

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


def _add_health_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """Whether the server is alive, and what it does (Prometheus metrics)."""

    @app.get("/v1/health", dependencies=auth)
    async def health(request: Request) -> dict[str, Any]:
        """Alive; to an admin, also which database it owns (a path on the server's
        machine is no business of any other caller)."""
        if principal_of(request.scope).role != "admin":
            return {"ok": True}
        return {"ok": True, "database": str(wb.settings.db_path)}

    @app.get("/metrics", dependencies=auth)
    def metrics(request: Request) -> Response:
        """Prometheus text format: runs, items, attempts, limiters, latency (metrics.py)."""
        body, content_type = metrics_response(wb, request.app.state.relay)
        return Response(body, media_type=content_type)


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
