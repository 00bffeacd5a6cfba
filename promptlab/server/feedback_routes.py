"""`POST /v1/feedback/events`: outcomes an application sends as they happen (impressions,
clicks, thumbs, completions, named scores), about a gateway call or a version and unit.

One event, or `{"events": [...]}` with up to 1,000; every event is stored or none, and
an event id seen before is skipped, so a client sends again after a lost answer without
counting anything twice (promptlab/data/feedback_events.py). The file upload at
`/v1/feedback` stays for files. Applications call this per user action: the body is
read by hand with orjson, as `/v1/assign`'s is (the server bounds it before reading).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from promptlab.data.feedback_events import KINDS, MAX_EVENTS
from promptlab.errors import FeedbackError
from promptlab.server.refusals import Refused
from promptlab.workbench import Workbench


class FeedbackEventIn(BaseModel):
    """One event (documents the body; the route reads it by hand)."""

    id: str = Field(max_length=200, description="The event's id: sent again, stored once.")
    trace: str | None = Field(None, description="The gateway call (its Promptlab-Trace).")
    version: str | None = Field(None, description="Else a version: name@label, semver or id.")
    unit: str | None = Field(None, max_length=200, description="With `version`: the unit.")
    kind: str = Field(description=f"One of {', '.join(KINDS)}.")
    name: str | None = Field(None, max_length=100, description="A score's name.")
    value: float | None = Field(None, description="A score's value; else optional (1).")
    time: str | None = Field(None, description="ISO 8601; when the server received it.")


class FeedbackEventsIn(BaseModel):
    """A batch of events: stored together or not at all."""

    events: list[FeedbackEventIn] = Field(max_length=MAX_EVENTS)


def add_feedback_event_routes(
    app: FastAPI, wb: Workbench, auth: list[Any], settle: Callable[[], None]
) -> None:
    """POST /v1/feedback/events; `settle()` stores the gateway calls answered so far, so
    an event about a call answered a moment ago finds it."""

    def record(body: Any) -> tuple[int, int]:
        settle()
        return wb.analysis.record_feedback_events(body)

    schema = {"anyOf": [FeedbackEventIn.model_json_schema(), FeedbackEventsIn.model_json_schema()]}

    @app.post(
        "/v1/feedback/events",
        dependencies=auth,
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}
        },
    )
    async def feedback_events(request: Request) -> Response:
        """Store feedback events: `{"accepted": N, "duplicates": M}` (an event id stored
        before is a duplicate, and stores nothing). A bad event refuses the whole body
        with a 422 naming it and its field (`events[3].trace: no call with trace ...`)."""
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            raise Refused(422, "body: not JSON") from None
        try:
            accepted, duplicates = await run_in_threadpool(record, body)
        except FeedbackError as exc:
            raise Refused(422, str(exc)) from None
        answer = {"accepted": accepted, "duplicates": duplicates}
        return Response(orjson.dumps(answer), media_type="application/json")
