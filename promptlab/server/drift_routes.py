"""`/v1/runs/{run_id}/drift`: a run's semantic drift checked, and its last check read
(`promptlab drift RUN_ID [--last]`), so the command works while a server or the app owns
the database. The embedder is an endpoint of this server's providers file: a caller
names one, never a place or a key. Answers are the facade's records (server/typed.py)."""

from __future__ import annotations

from fastapi import FastAPI, Header, Request, Response
from pydantic import BaseModel, Field

from promptlab.evaluation.drift import VersionDrift
from promptlab.server.answers import Submits, request_once, typed_response
from promptlab.store.idempotency import IdempotencyKeys
from promptlab.workbench import Workbench


class DriftIn(BaseModel):
    """Which embedder, and the distance past which a filled prompt is drifted."""

    model: str = Field(
        "sim:embed",
        max_length=200,
        pattern=r"^[^:\s]+:\S+$",
        description="ENDPOINT:MODEL of this server's providers file.",
    )
    threshold: float | None = Field(
        None, gt=0, le=2, description="A cosine distance; none: the check's default."
    )
    reference: str | None = Field(
        None, max_length=200, description="A dataset whose rows' centroid is the anchor."
    )


def add_drift_routes(app: FastAPI, wb: Workbench) -> None:
    # A check retried with its Idempotency-Key answers the first one's figures.
    checks: Submits[list[VersionDrift]] = Submits(list[VersionDrift], IdempotencyKeys(wb.store))

    @app.get("/v1/runs/{run_id}/drift")
    def last_drift(run_id: str) -> Response:
        """Each variant's drift rate from the run's last check (no prompts: none made)."""
        return typed_response(list[VersionDrift], wb.drift.found(run_id))

    @app.post("/v1/runs/{run_id}/drift")
    def check_drift(
        request: Request, run_id: str, body: DriftIn, idempotency_key: str | None = Header(None)
    ) -> Response:
        """Embed each of the run's filled prompts and compare it with its version's
        typical prompt; keep which drifted, answer each variant's rate. Recorded as a
        `drift.checked` change event."""

        def check() -> list[VersionDrift]:
            return wb.drift.check(run_id, body.model, body.threshold, body.reference)

        said = f"{run_id} {body.model_dump_json()}"
        found = request_once(checks, request, idempotency_key, said, check)
        return typed_response(list[VersionDrift], found)
