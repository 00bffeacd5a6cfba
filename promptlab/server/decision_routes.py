"""`/v1/analysis/decisions`: the final look at two versions in production logs, taken
once (`promptlab decide`, Compare's "Decide now"). Answers are Decided records
(server/typed.py), so the CLI prints them as it does on its own. Reading one is a
viewer's; taking one is an editor's, recorded as theirs (roles.py)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from promptlab.facades.decisions import Decided
from promptlab.server.answers import typed_response
from promptlab.workbench import Workbench


class DecisionIn(BaseModel):
    a: str = Field(max_length=300)
    b: str = Field(max_length=300)
    planned_units: int | None = Field(default=None, ge=1)
    since: str | None = Field(default=None, max_length=40)


def add_decision_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    @app.get("/v1/analysis/decisions", dependencies=auth)
    async def decision(a: str, b: str) -> Response:
        """The decision taken on version `b` against `a` in the logs (null: none yet)."""
        found = await run_in_threadpool(wb.analysis.decisions.get, a, b)
        return typed_response(Decided, found)

    @app.post("/v1/analysis/decisions", dependencies=auth)
    async def decide(body: DecisionIn) -> Response:
        """Take the final look once: refused before the planned units are in, and after."""

        def take() -> Decided:
            return wb.analysis.decisions.decide(
                body.a, body.b, planned_units=body.planned_units, since=body.since
            )

        return typed_response(Decided, await run_in_threadpool(take))
