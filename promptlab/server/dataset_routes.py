"""`/v1/datasets/...` beyond the upload, list and preview (promptlab/server/data_routes.py):
a dataset's rows streamed, a conversation log's sessions, rows checked against a prompt,
the unit column, deletion; and a prompt version's output checks (`promptlab validate`).

Answers are the facade's records (server/typed.py), so the CLI prints them as it does
on its own (`promptlab dataset ...`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from promptlab.records import RowCheck, SessionSummary, Turn
from promptlab.records.datasets import DatasetInfo
from promptlab.server.answers import typed_response
from promptlab.workbench import Workbench


class UnitColumnIn(BaseModel):
    column: str | None = Field(description="The column naming the unit; null: none.")


class OutputChecks(BaseModel):
    """What outputs of a prompt version are checked against (`promptlab validate`)."""

    ref: str = Field(description="The version, as `name@semver`.")
    output_schema: dict[str, Any] | None
    rules: list[dict[str, Any]]


def add_dataset_routes(app: FastAPI, wb: Workbench) -> None:
    @app.get("/v1/datasets/{name}/rows")
    def dataset_rows(name: str, limit: int | None = Query(None, ge=0)) -> StreamingResponse:
        """The dataset's rows in order (`limit`: the first ones), as JSON Lines, each row
        masked as every row shown is (`promptlab dataset show` prints these lines)."""
        wb.datasets.get(name)  # an unknown name is a 404 before anything is streamed
        rows = wb.datasets.rows(name, limit)

        def lines() -> Iterator[bytes]:
            for row in rows:
                yield (json.dumps(row, ensure_ascii=False) + "\n").encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.get("/v1/datasets/{name}/sessions")
    def sessions(name: str, limit: int = Query(500, ge=1, le=100_000)) -> Response:
        """A conversation log's sessions, in order of first appearance (SessionSummary)."""
        return typed_response(list[SessionSummary], wb.datasets.sessions(name, limit))

    @app.get("/v1/datasets/{name}/sessions/{session}")
    def session(name: str, session: str) -> Response:
        """One session's messages in order (Turn), masked; none for an unknown session."""
        return typed_response(list[Turn], wb.datasets.session(name, session))

    @app.get("/v1/datasets/{name}/check")
    def check(name: str, prompt: str, listed: int = Query(100, ge=0, le=100_000)) -> Response:
        """Every row checked against the prompt version's variables (a RowCheck): counts
        and the first `listed` problems (cells quoted in them masked)."""
        return typed_response(RowCheck, wb.datasets.check_rows(name, prompt, listed))

    @app.put("/v1/datasets/{name}/unit-column")
    def set_unit_column(name: str, body: UnitColumnIn) -> Response:
        """Make a column the unit column (what an experiment assigns): the DatasetInfo."""
        return typed_response(DatasetInfo, wb.datasets.set_unit_column(name, body.column))

    @app.delete("/v1/datasets/{name}")
    def delete(name: str) -> dict[str, str]:
        """Delete the dataset and its rows (runs keep their own copy of the rows used)."""
        wb.datasets.delete(name)
        return {"deleted": name}

    @app.get("/v1/output-checks")
    def output_checks(prompt: str) -> OutputChecks:
        """A prompt version's output schema and rules (name, name@1.2.0, name@label)."""
        version = wb.prompts.resolve(prompt)
        template = version.template
        rules = [dict(rule) for rule in template.rules]
        schema = template.output_schema
        return OutputChecks(
            ref=version.ref, output_schema=None if schema is None else dict(schema), rules=rules
        )
