"""The prompt registry's routes for `promptlab init` and `promptlab prompt ...`.

Answers are the facade's own records (server/typed.py), so the CLI prints them as it
does on its own. A prompt file is read by the client and sent as its text, with the
git commit the client read it at (the server runs no git on a client's path); an export
is answered as text and written by the client: this server reads and writes no path a
client names. `POST /v1/demo` loads the demo this server ships (its own data/demo) and
starts the demo run, whose id the client then follows.
"""

from __future__ import annotations

from fastapi import FastAPI, Header, Request, Response
from pydantic import BaseModel, Field

from promptlab.errors import PromptFileError
from promptlab.prompts.files import parse_prompt_data
from promptlab.records.prompts import (
    DemoLoaded,
    GitSource,
    LabelledVersion,
    PromptHistory,
    PromptSummary,
    SaveResult,
    VersionDiff,
)
from promptlab.server.answers import Submits, request_once, typed_response
from promptlab.server.principals import principal_of
from promptlab.store.idempotency import IdempotencyKeys
from promptlab.workbench import Workbench
from promptlab.yamlio import parse_yaml


class GitSourceIn(BaseModel):
    """The commit a prompt file was read at, as the client's git named it."""

    commit: str = Field(pattern=r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
    dirty: bool = Field(description="True when the file differed from that commit.")
    path: str = Field(max_length=4096, description="The file's path in its repository.")


class PromptFileIn(BaseModel):
    """A YAML prompt file's text, as the client read it."""

    text: str
    source: str = Field("<prompt>", description="The file's name, as errors name it.")
    author: str | None = Field(
        None, description="Whom new versions are for: a service's token acts on their behalf."
    )
    git: GitSourceIn | None = Field(
        None, description="The git commit the file was read at; None outside a work tree."
    )


def add_prompt_routes(app: FastAPI, wb: Workbench) -> None:
    imports: Submits[list[SaveResult]] = Submits(list[SaveResult], IdempotencyKeys(wb.store))
    demos: Submits[DemoLoaded] = Submits(DemoLoaded, IdempotencyKeys(wb.store))

    @app.get("/v1/prompts")
    def list_prompts() -> Response:
        """Every prompt with its latest version, version count and labels."""
        return typed_response(list[PromptSummary], wb.prompts.list())

    @app.post("/v1/prompts", status_code=201)
    def import_prompt_file(
        request: Request, body: PromptFileIn, idempotency_key: str | None = Header(None)
    ) -> Response:
        """Import a prompt file (its text): each changed version becomes a new version,
        its labels move. Checked here as on the client, before anything is saved."""
        principal = principal_of(request.scope)

        def start() -> list[SaveResult]:
            data = parse_yaml(body.text, where=body.source, error=PromptFileError)
            prompt_file = parse_prompt_data(data, source=body.source)
            author = principal.actor(body.author) if body.author else None
            git = GitSource(**body.git.model_dump()) if body.git else None
            return wb.prompts.import_file(prompt_file, author, git)

        results = request_once(imports, request, idempotency_key, body.model_dump_json(), start)
        return typed_response(list[SaveResult], results, 201)

    @app.get("/v1/prompt-refs/{ref}")
    def labelled_version(ref: str) -> Response:
        """The version a reference names (NAME, NAME@1.2.0, NAME@LABEL,
        NAME@sha256:PREFIX), with its template, and the labels pointing at it."""
        return typed_response(LabelledVersion, wb.prompts.labelled(ref))

    @app.get("/v1/prompts/{name}/history")
    def history(name: str) -> Response:
        """Every version, newest first, and the moves of the prompt's labels."""
        return typed_response(PromptHistory, wb.prompts.history(name))

    @app.get("/v1/prompts/{name}/diff")
    def diff(name: str, a: str, b: str) -> Response:
        """What changed from version `a` to `b` (semvers, labels or hashes)."""
        return typed_response(VersionDiff, wb.prompts.diff(name, a, b))

    @app.get("/v1/prompts/{name}/export")
    def export(name: str) -> Response:
        """Every version and label of the prompt as a YAML prompt file (a JSON string)."""
        return typed_response(str, wb.prompts.export(name))

    @app.post("/v1/demo", status_code=201)
    def load_demo(request: Request, idempotency_key: str | None = Header(None)) -> Response:
        """Load the demo (prompts, datasets, experiments; what is there is kept) and, into
        a database with no runs, start the demo run: follow it at /v1/runs/{run_id}."""

        def start() -> DemoLoaded:
            results = wb.demo.load()
            return DemoLoaded(results, wb.demo.start_run())

        loaded = request_once(demos, request, idempotency_key, "", start)
        return typed_response(DemoLoaded, loaded, 201)
