"""The API's routes for what services and monitors ask for: `/v1/assign` from experiment
configs held in memory, an experiment's run and current revision, the audit's verify.

`/v1/assign` is the route live services call per request: it reads its body by hand
and answers from a config cache (no database) refreshed at most every CONFIG_TTL_S.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
from fastapi import FastAPI, Header, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from promptlab.audit.report import VerifyReport
from promptlab.experiments import assign, config_from_mapping
from promptlab.experiments.config import ExperimentConfig
from promptlab.server.answers import Submits, typed_response
from promptlab.server.refusals import Refused
from promptlab.server.run_routes import once, progress
from promptlab.store.idempotency import IdempotencyKeys
from promptlab.workbench import Workbench

#: Most units one /v1/assign call may ask for.
MAX_ASSIGN_UNITS = 10_000
#: Seconds an experiment's config is served from memory before it is read again. A
#: change made through this process replaces it at once (Experiments.on_change); this
#: bounds how long one made by another process (a CLI on its own copy, a restore) waits.
CONFIG_TTL_S = 1.0


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


def add_assign_routes(
    app: FastAPI, wb: Workbench, auth: list[Any], configs: ExperimentConfigs
) -> None:
    """POST /v1/assign: variants for units, from configs held in memory."""

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


def add_service_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    """An experiment's run and current revision; the audit trail's verify."""
    submits: Submits[str] = Submits(str, IdempotencyKeys(wb.store))

    @app.post("/v1/experiments/{name}/runs", dependencies=auth, status_code=201)
    def run_experiment(
        request: Request,
        name: str,
        body: ExperimentRunIn,
        idempotency_key: str | None = Header(None),
    ) -> dict[str, Any]:
        """The experiment's latest revision on an imported dataset: its estimate (lines,
        as the CLI prints them) and, unless `estimate_only`, the started run."""
        from promptlab.views.estimate import estimate_lines

        spec = wb.runs.experiment_spec(
            name,
            body.dataset,
            mode=body.mode,
            unit_column=body.unit_column,
            repeats=body.repeats,
            limit_rows=body.limit_rows,
            skip_invalid_rows=body.skip_invalid_rows,
            executor=body.executor,
        )
        estimate = list(estimate_lines(wb.runs.estimate(spec)))
        if body.estimate_only:
            return {"estimate": estimate, "run": None}
        run_id = once(submits, request, idempotency_key, body, lambda: wb.runs.start(spec))
        return {"estimate": estimate, "run": progress(wb, run_id)}

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


class ExperimentConfigs:
    """Experiment configs by name, read from the store at most every CONFIG_TTL_S.

    A config is never replaced by an older revision: a read under way when a change
    lands (a kill) gives way to the change, which stays held."""

    def __init__(self, wb: Workbench) -> None:
        self._wb = wb
        self._configs: dict[str, tuple[float, ExperimentConfig]] = {}
        self._loading = threading.Lock()
        self._holding = threading.Lock()
        wb.experiments.on_change(self._changed)

    def _changed(self, config: ExperimentConfig) -> None:
        # The new revision, parsed from its exported form, as `load` would read it.
        self._hold(config_from_mapping(config.to_dict()))

    def _hold(self, config: ExperimentConfig) -> ExperimentConfig:
        """Hold `config` from now, unless a newer revision is held: that one stays."""
        with self._holding:
            held = self._configs.get(config.name)
            if held is not None and held[1].revision > config.revision:
                config = held[1]
            self._configs[config.name] = (time.monotonic(), config)
            return config

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
            return self._hold(config_from_mapping(self._wb.experiments.get(name).to_dict()))

    def current(self, name: str) -> ExperimentConfig:
        """The config held, or read now (the gateway's calls: a read at most every
        CONFIG_TTL_S per experiment)."""
        return self.fresh(name) or self.load(name)
