"""`/v1/rollouts/...`: guarded rollouts' status, and a person's pause, resume and abort
(`promptlab rollout ...`). Answers are RolloutStatus records (server/typed.py), so the
CLI prints them as it does on its own. Moving a rollout moves production traffic: pause,
resume and abort are an admin's, as the ramp and the kill switch are (roles.py)."""

from __future__ import annotations

import builtins
from typing import Any

from fastapi import FastAPI, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from promptlab.facades.rollouts import RolloutStatus
from promptlab.server.answers import typed_response
from promptlab.server.refusals import Refused
from promptlab.workbench import Workbench

#: What a person may do to a rollout, by the route's last segment.
ACTIONS = ("pause", "resume", "abort")


class RolloutActionIn(BaseModel):
    note: str = ""


def add_rollout_routes(app: FastAPI, wb: Workbench, auth: list[Any]) -> None:
    @app.get("/v1/rollouts", dependencies=auth)
    async def rollouts() -> Response:
        """Every experiment with a rollout: its stage, units per arm and guardrails."""
        found = await run_in_threadpool(wb.rollouts.list)
        return typed_response(builtins.list[RolloutStatus], found)

    @app.get("/v1/rollouts/{name}", dependencies=auth)
    async def rollout(name: str) -> Response:
        """One rollout's status."""
        return typed_response(RolloutStatus, await run_in_threadpool(wb.rollouts.status, name))

    @app.post("/v1/rollouts/{name}/{action}", dependencies=auth)
    async def move(name: str, action: str, body: RolloutActionIn) -> Response:
        """Pause, resume or abort (the kill switch, for good) a rollout; its status after."""
        if action not in ACTIONS:
            raise Refused(404, f"no rollout action {action!r} (one of {', '.join(ACTIONS)})")
        moved = getattr(wb.rollouts, action)
        return typed_response(RolloutStatus, await run_in_threadpool(moved, name, body.note))
