"""The role each route needs: viewer reads; editor runs, edits prompts and datasets,
sends feedback and reviews; admin manages tokens and an experiment's ramp and kill switch;
gateway (an application's token) calls the live gateway and sends feedback events only.

One table, so a reader sees the whole policy at once; a route missing from it is
refused to everyone (promptlab/server/principals.py), and tests/test_server_roles.py
walks every route the app serves with every role.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI

#: Paths anyone may read: the API's description (it holds no data).
PUBLIC_PATHS = frozenset({"/openapi.json"})

VIEWER, EDITOR, ADMIN = "viewer", "editor", "admin"
#: An application's token (facades/tokens.py GATEWAY): these routes and nothing else;
#: editors and admins may call them too.
GATEWAY = "gateway"

ROUTE_ROLES: dict[tuple[str, str], str] = {
    ("GET", "/v1/health"): VIEWER,
    ("GET", "/metrics"): VIEWER,
    ("GET", "/v1/runs"): VIEWER,
    ("GET", "/v1/run-summaries"): VIEWER,
    ("POST", "/v1/runs"): EDITOR,
    ("POST", "/v1/batches"): EDITOR,
    ("GET", "/v1/runs/{run_id}"): VIEWER,
    ("POST", "/v1/runs/{run_id}/cancel"): EDITOR,
    ("POST", "/v1/runs/{run_id}/pause"): EDITOR,
    ("POST", "/v1/runs/{run_id}/resume"): EDITOR,
    ("GET", "/v1/runs/{run_id}/items"): VIEWER,
    ("GET", "/v1/runs/{run_id}/batch-output"): VIEWER,
    ("GET", "/v1/runs/{run_id}/comparison"): VIEWER,
    ("GET", "/v1/runs/{run_id}/items/{key}"): VIEWER,
    ("GET", "/v1/runs/{run_id}/view"): VIEWER,
    ("GET", "/v1/runs/{run_id}/sessions"): VIEWER,
    ("GET", "/v1/runs/{run_id}/shards"): VIEWER,
    ("GET", "/v1/runs/{run_id}/repeats"): VIEWER,
    # Reruns the anomaly detectors over stored results: the run's alerts are replaced.
    ("POST", "/v1/runs/{run_id}/anomalies"): EDITOR,
    ("GET", "/v1/analysis/log-metrics"): VIEWER,
    ("GET", "/v1/analysis/scores"): VIEWER,
    ("GET", "/v1/analysis/after-run-failures"): VIEWER,
    # Services ask which variant a unit sees: a read of the experiment's config.
    ("POST", "/v1/assign"): VIEWER,
    ("POST", "/v1/experiments/{name}/runs"): EDITOR,
    ("GET", "/v1/experiments/{name}"): VIEWER,
    ("GET", "/v1/experiments"): VIEWER,
    # Adding a file that moves an existing experiment's ramp or kill switch: admin
    # (checked in the route, experiment_routes.py).
    ("POST", "/v1/experiments"): EDITOR,
    ("GET", "/v1/experiments/{name}/revisions"): VIEWER,
    ("GET", "/v1/experiments/{name}/revisions/{revision}"): VIEWER,
    ("GET", "/v1/experiments/{name}/exposures"): VIEWER,
    ("GET", "/v1/experiments/{name}/export"): VIEWER,
    ("POST", "/v1/experiments/{name}/weights"): EDITOR,
    # The kill switch and the ramp (weights may change with them).
    ("POST", "/v1/experiments/{name}/traffic"): ADMIN,
    # Guarded rollouts: read by viewers; moved by hand as the ramp is, by an admin.
    ("GET", "/v1/rollouts"): VIEWER,
    ("GET", "/v1/rollouts/{name}"): VIEWER,
    ("POST", "/v1/rollouts/{name}/{action}"): ADMIN,
    # The final look at two versions in the logs, taken once: read by viewers, taken by
    # an editor (as a comparison's run would be).
    ("GET", "/v1/analysis/decisions"): VIEWER,
    ("POST", "/v1/analysis/decisions"): EDITOR,
    ("POST", "/v1/exposures"): EDITOR,
    ("GET", "/v1/audit/verify"): VIEWER,
    ("GET", "/v1/audit/events"): VIEWER,
    ("GET", "/v1/audit/traces/{trace}"): VIEWER,
    ("GET", "/v1/audit/export"): VIEWER,
    ("GET", "/v1/prompts"): VIEWER,
    ("POST", "/v1/prompts"): EDITOR,
    ("GET", "/v1/prompt-refs/{ref}"): VIEWER,
    ("GET", "/v1/prompts/{name}/history"): VIEWER,
    ("GET", "/v1/prompts/{name}/diff"): VIEWER,
    ("GET", "/v1/prompts/{name}/export"): VIEWER,
    # The demo this server ships: prompts, datasets, experiments and the demo run.
    ("POST", "/v1/demo"): EDITOR,
    ("GET", "/v1/prompts/{name}/versions"): VIEWER,
    ("POST", "/v1/prompts/{name}/versions"): EDITOR,
    ("PUT", "/v1/prompts/{name}/labels/{label}"): EDITOR,
    ("GET", "/v1/datasets"): VIEWER,
    ("GET", "/v1/datasets/{name}"): VIEWER,
    ("POST", "/v1/datasets"): EDITOR,
    ("GET", "/v1/datasets/{name}/rows"): VIEWER,
    ("GET", "/v1/datasets/{name}/sessions"): VIEWER,
    ("GET", "/v1/datasets/{name}/sessions/{session}"): VIEWER,
    ("GET", "/v1/datasets/{name}/check"): VIEWER,
    ("PUT", "/v1/datasets/{name}/unit-column"): EDITOR,
    ("DELETE", "/v1/datasets/{name}"): EDITOR,
    ("GET", "/v1/output-checks"): VIEWER,
    ("POST", "/v1/feedback"): EDITOR,
    ("POST", "/v1/logs"): EDITOR,
    ("GET", "/v1/analysis/metrics"): VIEWER,
    ("GET", "/v1/analysis/compare"): VIEWER,
    ("GET", "/v1/exports/{table}"): VIEWER,
    ("GET", "/v1/schedules"): VIEWER,
    ("POST", "/v1/schedules"): EDITOR,
    ("POST", "/v1/schedules/{name}/pause"): EDITOR,
    ("POST", "/v1/schedules/{name}/resume"): EDITOR,
    ("DELETE", "/v1/schedules/{name}"): EDITOR,
    ("GET", "/v1/review/items"): VIEWER,
    ("GET", "/v1/review/items/{item_id}"): VIEWER,
    ("POST", "/v1/review/items/{item_id}/{decision}"): EDITOR,
    ("POST", "/v1/review/add"): EDITOR,
    ("POST", "/v1/jobs/table-exports"): VIEWER,
    ("POST", "/v1/jobs/review-exports"): VIEWER,
    ("POST", "/v1/jobs/backups"): ADMIN,
    ("GET", "/v1/jobs/{job_id}"): VIEWER,
    ("GET", "/v1/jobs/{job_id}/file"): VIEWER,
    # The live gateway (promptlab/gateway/): what applications call in production.
    ("POST", "/v1/chat/completions"): GATEWAY,
    ("POST", "/v1/messages"): GATEWAY,
    ("POST", "/v1/feedback/events"): GATEWAY,
    # The response cache: its figures read; cleared (answers kept for reuse, never
    # results) as an editor's change, audited.
    ("GET", "/v1/cache"): VIEWER,
    ("POST", "/v1/cache/clear"): EDITOR,
    # A run's semantic drift: read; checked (it calls the embeddings endpoint, and
    # replaces the run's last check).
    ("GET", "/v1/runs/{run_id}/drift"): VIEWER,
    ("POST", "/v1/runs/{run_id}/drift"): EDITOR,
    ("GET", "/v1/tokens"): ADMIN,
    ("POST", "/v1/tokens"): ADMIN,
    ("POST", "/v1/tokens/{token_id}/revoke"): ADMIN,
}


def document_roles(app: FastAPI, roles: Mapping[tuple[str, str], str] = ROUTE_ROLES) -> None:
    """Each operation in the served OpenAPI description says the role it needs
    (`x-required-role`, from `roles`: the table's and plugin routes'), so a client's
    author can read the policy where the routes are."""
    from fastapi.openapi.utils import get_openapi

    def described() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            for path, operations in schema.get("paths", {}).items():
                for method, operation in operations.items():
                    role = roles.get((method.upper(), path))
                    if role is not None:
                        operation["x-required-role"] = role
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = described  # type: ignore[method-assign]
