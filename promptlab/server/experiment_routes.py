"""`/v1/experiments/...` and `/v1/exposures`: add, read, change and export experiments,
import exposure logs (`promptlab experiment ...`, `promptlab exposures import`).

Answers are ExperimentConfigs (server/typed.py), so the CLI prints them as it does on its
own. `GET /v1/experiments/{name}` (the exported form services assign from), `POST
/v1/assign` and `POST /v1/experiments/{name}/runs` are in promptlab/server/api.py.

Weights are an editor's to change; the kill switch and the ramp an admin's: `traffic`
is its own route (roles.py), and an experiment file whose ramp or kill switch differs
from the latest revision's is added by an admin only.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Header, Query, Request, Response
from pydantic import BaseModel, Field

from promptlab.errors import ExperimentError
from promptlab.experiments import ExperimentConfig, ExperimentFile, parse_experiment_file
from promptlab.facades.tokens import role_allows
from promptlab.server.answers import (
    Submits,
    request_once,
    typed_response,
)
from promptlab.server.jobs import Job
from promptlab.server.principals import principal_of
from promptlab.server.refusals import Refused
from promptlab.server.roles import ADMIN
from promptlab.server.uploads import import_job
from promptlab.store.idempotency import IdempotencyKeys
from promptlab.workbench import Workbench

#: A change's answer: the latest revision before it and the one after (equal: nothing).
Change = tuple[ExperimentConfig, ExperimentConfig]


class ExperimentIn(BaseModel):
    """An experiment file, read and checked where it is (an ExperimentFile as data)."""

    experiment: dict[str, Any] = Field(description="What the file says (its content).")
    source: str = Field("<experiment>", description="The file's name, for refusals.")
    note: str = Field("", description="Why: kept with the new revision.")
    based_on: int | None = Field(
        None, ge=0, description="The revision the file changes (0: a new experiment)."
    )


class WeightsIn(BaseModel):
    """New weights of some variants (the others keep theirs)."""

    weights: dict[str, int | float] = Field(default_factory=dict)
    note: str = ""
    based_on: int | None = Field(None, ge=1, description="The revision the change was made on.")


class TrafficIn(WeightsIn):
    """The ramp or the kill switch (and weights with them, in the same revision)."""

    ramp: float | None = Field(None, ge=0, le=100)
    killed: bool | None = None


def add_experiment_routes(app: FastAPI, wb: Workbench) -> None:
    _reads(app, wb)
    _changes(app, wb)
    _exposure_imports(app, wb)


def _reads(app: FastAPI, wb: Workbench) -> None:
    @app.get("/v1/experiments")
    def list_experiments() -> Response:
        """The latest revision of every experiment, by name."""
        return typed_response(list[ExperimentConfig], wb.experiments.list())

    @app.get("/v1/experiments/{name}/revisions")
    def revisions(name: str) -> Response:
        """Every revision, newest first."""
        return typed_response(list[ExperimentConfig], wb.experiments.history(name))

    @app.get("/v1/experiments/{name}/revisions/{revision}")
    def revision(name: str, revision: str) -> Response:
        """One revision: its number, or `latest`."""
        return typed_response(ExperimentConfig, wb.experiments.get(name, _revision(revision)))

    @app.get("/v1/experiments/{name}/exposures")
    def exposure_counts(name: str) -> Response:
        """Distinct units exposed per revision and variant: `[[revision, variant, units]]`."""
        counts = wb.experiments.exposure_counts(name)
        rows = [(rev, variant, units) for (rev, variant), units in counts.items()]
        return typed_response(list[tuple[int, str, int]], rows)

    @app.get("/v1/experiments/{name}/export")
    def export(name: str, revision: int | None = Query(None, ge=1)) -> Response:
        """The full config of a revision as YAML text (what `promptlab assign FILE` reads),
        as a JSON string."""
        return typed_response(str, wb.experiments.export(name, revision))


def _changes(app: FastAPI, wb: Workbench) -> None:
    # One cache per route: a key reused on another route is another request.
    adds: Submits[tuple[ExperimentConfig, bool]] = Submits(
        tuple[ExperimentConfig, bool], IdempotencyKeys(wb.store)
    )
    changes: Submits[Change] = Submits(Change, IdempotencyKeys(wb.store))

    @app.post("/v1/experiments", status_code=201)
    def add(
        request: Request, body: ExperimentIn, idempotency_key: str | None = Header(None)
    ) -> Response:
        """Add an experiment file (checked again here); a changed file becomes a new
        revision: `[config, created]`. One that changes an existing experiment's ramp or
        kill switch needs an admin."""
        experiment = parse_experiment_file(body.experiment, source=body.source)

        def start() -> tuple[ExperimentConfig, bool]:
            _admin_for_traffic(request, wb, experiment)
            return wb.experiments.add(experiment, note=body.note, based_on=body.based_on)

        added = _once(adds, request, idempotency_key, body, start)
        return typed_response(tuple[ExperimentConfig, bool], added, 201)

    @app.post("/v1/experiments/{name}/weights")
    def set_weights(
        request: Request, name: str, body: WeightsIn, idempotency_key: str | None = Header(None)
    ) -> Response:
        """New weights: `[before, after]` (the same revision twice: nothing changed)."""
        return typed_response(
            Change, _once(changes, request, idempotency_key, body, lambda: _update(wb, name, body))
        )

    @app.post("/v1/experiments/{name}/traffic")
    def set_traffic(
        request: Request, name: str, body: TrafficIn, idempotency_key: str | None = Header(None)
    ) -> Response:
        """The ramp, the kill switch (and weights): `[before, after]`."""
        return typed_response(
            Change, _once(changes, request, idempotency_key, body, lambda: _update(wb, name, body))
        )


def _exposure_imports(app: FastAPI, wb: Workbench) -> None:
    exposure_imports: Submits[Job] = Submits()

    @app.post("/v1/exposures")
    async def import_exposures(
        request: Request,
        filename: str,
        source: str | None = None,
        idempotency_key: str | None = Header(None),
    ) -> Response:
        """The body is an exposure log (JSON Lines): how many exposures were new. A bad
        line refuses the whole file; `source` names the file in refusals and the audit
        trail (the sender's path; nothing reads it)."""
        job = await import_job(
            request,
            filename,
            exposure_imports,
            idempotency_key,
            "exposure-import",
            lambda path: wb.experiments.import_exposures(path, source=source),
        )
        return typed_response(Job, job, 202)


def _update(wb: Workbench, name: str, body: WeightsIn) -> Change:
    before = wb.experiments.get(name)
    ramp = body.ramp if isinstance(body, TrafficIn) else None
    killed = body.killed if isinstance(body, TrafficIn) else None
    after = wb.experiments.update(
        name,
        weights=body.weights,
        ramp=ramp,
        killed=killed,
        note=body.note,
        based_on=body.based_on,
    )
    return before, after


def _admin_for_traffic(request: Request, wb: Workbench, experiment: ExperimentFile) -> None:
    """Refuse (403) a non-admin's file that moves an existing experiment's ramp or kill
    switch, or its rollout (which moves them by itself): those are an admin's (a new
    experiment's are not yet anyone's traffic)."""
    principal = principal_of(request.scope)
    if role_allows(principal.role, ADMIN):
        return
    try:
        latest = wb.experiments.get(experiment.name)
    except ExperimentError:
        return
    moved = latest.ramp != experiment.ramp or latest.killed != experiment.killed
    if moved or latest.rollout != experiment.rollout:
        raise Refused(
            403,
            f"{principal.name} is a {principal.role}; changing the ramp, the kill "
            f"switch or the rollout of {experiment.name} needs admin",
        )


def _once(
    submits: Submits[Any], request: Request, key: str | None, body: BaseModel, start: Any
) -> Any:
    return request_once(submits, request, key, body.model_dump_json(), start)


def _revision(text: str) -> int | None:
    if text == "latest":
        return None
    if not text.isdigit() or int(text) < 1:
        raise Refused(422, f"revision: a number from 1, or latest, not {text!r:.40}")
    return int(text)
