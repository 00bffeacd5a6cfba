"""fakellm's Batch API routes: OpenAI's files and batches (`/v1/files`, `/v1/batches`),
Anthropic's Message Batches (`/v1/messages/batches`), and `GET /_batches` (every batch's
id, format, status and counts, for tests).

The routes ask for the key exactly as the chat routes do. What they answer follows the
SDKs' types (openai.types.Batch and FileObject, anthropic.types.messages.MessageBatch);
the objects themselves are built in batch_objects.py, the state behind them is in
fakellm/batches.py, the input checks in batch_input.py.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import BodyPartReader, web

from promptlab.fakellm import wire
from promptlab.fakellm.batch_input import anthropic_requests, openai_create_refusal, openai_file
from promptlab.fakellm.batch_objects import anthropic_batch, openai_batch
from promptlab.fakellm.batches import ENDED, Batch, BatchStore, Phase, limits
from promptlab.fakellm.config import FakeLLMConfig
from promptlab.fakellm.limits import Limiter
from promptlab.fakellm.responses import ErrorResponses, key_header

#: What OpenAI's files route takes as a purpose.
PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})
#: Read bodies and uploads in pieces of this size, so a limit holds before all is read.
CHUNK = 1 << 16

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BatchHost(Protocol):
    """What the routes need of the server (fakellm/app.py's FakeLLM)."""

    config: FakeLLMConfig
    limiter: Limiter
    batches: BatchStore

    def authorized(self, request: web.Request) -> bool: ...


class BatchRoutes:
    """The handlers of both formats, over the server's BatchStore."""

    def __init__(self, host: BatchHost) -> None:
        self.host = host

    @property
    def store(self) -> BatchStore:
        # One store for the server's life: a reset clears it in place.
        return self.host.batches

    def guarded(self, handler: Handler, anthropic: bool) -> Handler:
        """The handler behind the same key check as the chat routes."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            if not self.host.authorized(request):
                return ErrorResponses(
                    anthropic, self.store.new_id("req_"), self.host.limiter
                ).auth()
            return await handler(request)

        return guarded

    def _reply(self, data: Any, anthropic: bool, status: int = 200) -> web.Response:
        header = "request-id" if anthropic else "x-request-id"
        return web.Response(
            status=status,
            body=wire.dumps(data),
            content_type="application/json",
            headers={header: self.store.new_id("req_")},
        )

    def _openai_error(
        self, status: int, message: str, code: str | None = None, param: str | None = None
    ) -> web.Response:
        error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
        return self._reply({"error": error}, False, status)

    def _anthropic_error(self, status: int, message: str) -> web.Response:
        rid = self.store.new_id("req_")
        body = json.loads(wire.anthropic_error(status, message, rid))
        if status == 413:
            body["error"]["type"] = "request_too_large"
        return web.Response(
            status=status,
            body=wire.dumps(body),
            content_type="application/json",
            headers={"request-id": rid},
        )

    def _batch(self, request: web.Request, anthropic: bool) -> Batch | None:
        batch = self.store.batches.get(request.match_info["batch_id"])
        return batch if batch is not None and batch.anthropic == anthropic else None

    # --- OpenAI files ---------------------------------------------------------------------

    async def file_create(self, request: web.Request) -> web.StreamResponse:
        if not request.content_type.startswith("multipart/"):
            return self._openai_error(400, "The request must be multipart/form-data.")
        _, max_bytes = limits(self.host.config, anthropic=False)
        purpose, upload = None, None
        async for part in await request.multipart():
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "purpose":
                purpose = (await part.text()).strip()
            elif part.name == "file":
                upload = (part.filename or "upload.jsonl", *await _read_part(part, max_bytes))
            else:
                await part.release()
        if upload is None:
            return self._openai_error(
                400, "Missing required parameter: 'file'.", "missing_required_parameter", "file"
            )
        if purpose not in PURPOSES:
            return self._openai_error(
                400, f"Invalid value for 'purpose': {purpose!r}.", "invalid_value", "purpose"
            )
        return self._reply(self.store.add_file(upload[0], purpose, *upload[1:]).as_json(), False)

    async def file_get(self, request: web.Request) -> web.StreamResponse:
        stored = self.store.files.get(request.match_info["file_id"])
        if stored is None:
            return self._no_file(request.match_info["file_id"])
        return self._reply(stored.as_json(), False)

    async def file_content(self, request: web.Request) -> web.StreamResponse:
        stored = self.store.files.get(request.match_info["file_id"])
        if stored is None:
            return self._no_file(request.match_info["file_id"])
        if not stored.whole:
            return self._openai_error(
                400,
                "fakellm kept only the first "
                f"{len(stored.data)} bytes of this file (past the batch "
                "limit), so it cannot send it back.",
            )
        return web.Response(body=stored.data, content_type="application/octet-stream")

    async def file_delete(self, request: web.Request) -> web.StreamResponse:
        stored = self.store.files.pop(request.match_info["file_id"], None)
        if stored is None:
            return self._no_file(request.match_info["file_id"])
        return self._reply({"id": stored.id, "object": "file", "deleted": True}, False)

    def _no_file(self, file_id: str) -> web.Response:
        return self._openai_error(404, f"No such File object: {file_id}", None, "id")

    # --- OpenAI batches -------------------------------------------------------------------

    async def batch_create(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError as exc:
            return self._openai_error(
                400, f"We could not parse the JSON body of your request: {exc}"
            )
        refusal = openai_create_refusal(body)
        if refusal is not None:
            return self._openai_error(400, *refusal)
        stored = self.store.files.get(body["input_file_id"])
        if stored is None:
            return self._no_file(body["input_file_id"])
        if stored.purpose != "batch":
            return self._openai_error(
                400,
                "The input file must be uploaded with purpose 'batch'.",
                "invalid_value",
                "input_file_id",
            )
        lines, errors = openai_file(stored.data, stored.size, *limits(self.host.config, False))
        if self.host.config.batch_echo_auth:
            echoed = f"refused, key {key_header(request, False)}"
            errors = [{"code": "invalid_request", "message": echoed, "param": None, "line": 1}]
        batch = self.store.create(
            lines,
            anthropic=False,
            refused=errors,
            input_file_id=stored.id,
            metadata=body.get("metadata"),
            model=lines[0].request.model if lines else None,
        )
        return self._reply(openai_batch(batch, Phase("validating", 0, {})), False)

    async def batch_get(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, anthropic=False)
        if batch is None:
            return self._no_batch(request)
        return self._reply(openai_batch(batch, await self.store.observe(batch)), False)

    async def batch_cancel(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, anthropic=False)
        if batch is None:
            return self._no_batch(request)
        phase = await self.store.cancel(batch)
        if phase is None:
            status = (await self.store.observe(batch)).status
            return self._openai_error(400, f"Cannot cancel a batch with status '{status}'.")
        return self._reply(openai_batch(batch, phase), False)

    async def batch_list(self, request: web.Request) -> web.StreamResponse:
        page = self._page(request, anthropic=False, cursor="after", most=100)
        if isinstance(page, str):
            return self._openai_error(400, page, "invalid_value")
        items, more = page
        data = [openai_batch(b, await self.store.observe(b)) for b in items]
        return self._reply(
            {
                "object": "list",
                "data": data,
                "has_more": more,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            },
            False,
        )

    def _no_batch(self, request: web.Request) -> web.Response:
        return self._openai_error(
            404, f"No batch found with id '{request.match_info['batch_id']}'."
        )

    def _page(
        self, request: web.Request, *, anthropic: bool, cursor: str, most: int
    ) -> tuple[list[Batch], bool] | str:
        """Newest first, from after the cursor's batch (or before `before_id`), `limit` long;
        or what is wrong with the query."""
        query = request.query
        try:
            limit = int(query.get("limit", "20"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= most:
            return f"limit: expected a whole number from 1 to {most}"
        items = [b for b in reversed(self.store.batches.values()) if b.anthropic == anthropic]
        ids = [b.id for b in items]
        if query.get("before_id") in ids:
            end = ids.index(query["before_id"])
            return items[max(0, end - limit) : end], end - limit > 0
        start = ids.index(query[cursor]) + 1 if query.get(cursor) in ids else 0
        return items[start : start + limit], start + limit < len(items)

    # --- Anthropic Message Batches --------------------------------------------------------

    async def message_batch_create(self, request: web.Request) -> web.StreamResponse:
        max_requests, max_bytes = limits(self.host.config, anthropic=True)
        raw = await _read_body(request, max_bytes)
        if raw is None:
            return self._anthropic_error(
                413, f"Request exceeds the maximum size of {max_bytes} bytes for a Message Batch."
            )
        try:
            body = json.loads(raw)
            lines = anthropic_requests(body, request.headers.get("anthropic-version"), max_requests)
        except ValueError as exc:
            return self._anthropic_error(400, f"There was an error parsing the body: {exc}")
        except wire.WireError as exc:
            return self._anthropic_error(400, str(exc))
        if self.host.config.batch_echo_auth:
            return self._anthropic_error(400, f"refused, key {key_header(request, True)}")
        batch = self.store.create(lines, anthropic=True)
        return self._reply(
            anthropic_batch(batch, Phase("in_progress", 0, {}), _origin(request)), True
        )

    async def message_batch_get(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, anthropic=True)
        if batch is None:
            return self._no_message_batch(request)
        phase = await self.store.observe(batch)
        return self._reply(anthropic_batch(batch, phase, _origin(request)), True)

    async def message_batch_cancel(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, anthropic=True)
        if batch is None:
            return self._no_message_batch(request)
        phase = await self.store.cancel(batch)
        if phase is None:
            return self._anthropic_error(
                400, f"Message Batch {batch.id} has already ended and cannot be canceled."
            )
        return self._reply(anthropic_batch(batch, phase, _origin(request)), True)

    async def message_batch_results(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, anthropic=True)
        if batch is None:
            return self._no_message_batch(request)
        if (await self.store.observe(batch)).status not in ENDED or batch.output is None:
            return self._anthropic_error(
                400,
                f"Message Batch {batch.id} is still processing: "
                "its results are ready once it has ended.",
            )
        return web.Response(body=batch.output, content_type="application/x-jsonl")

    async def message_batch_delete(self, request: web.Request) -> web.StreamResponse:
        batch = self._batch(request, anthropic=True)
        if batch is None:
            return self._no_message_batch(request)
        if (await self.store.observe(batch)).status not in ENDED:
            return self._anthropic_error(
                400,
                f"Message Batch {batch.id} cannot be deleted while processing; cancel it first.",
            )
        del self.store.batches[batch.id]
        return self._reply({"id": batch.id, "type": "message_batch_deleted"}, True)

    async def message_batch_list(self, request: web.Request) -> web.StreamResponse:
        page = self._page(request, anthropic=True, cursor="after_id", most=1000)
        if isinstance(page, str):
            return self._anthropic_error(400, page)
        items, more = page
        origin = _origin(request)
        data = [anthropic_batch(b, await self.store.observe(b), origin) for b in items]
        return self._reply(
            {
                "data": data,
                "has_more": more,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            },
            True,
        )

    def _no_message_batch(self, request: web.Request) -> web.Response:
        return self._anthropic_error(
            404, f"Message Batch {request.match_info['batch_id']} not found."
        )

    # --- control --------------------------------------------------------------------------

    async def overview(self, _request: web.Request) -> web.StreamResponse:
        """GET /_batches: every batch's id, format, status (the provider's word) and counts."""
        rows = []
        for batch in list(self.store.batches.values()):
            phase = await self.store.observe(batch)
            if batch.anthropic:
                shown = anthropic_batch(batch, phase, "")
                status, counts = shown["processing_status"], shown["request_counts"]
            else:
                shown = openai_batch(batch, phase)
                status, counts = shown["status"], shown["request_counts"]
            rows.append(
                {
                    "id": batch.id,
                    "format": "anthropic" if batch.anthropic else "openai",
                    "status": status,
                    "counts": counts,
                }
            )
        return web.json_response(rows)


def _origin(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


async def _read_part(part: BodyPartReader, limit: int) -> tuple[bytes, int]:
    """(what is kept, the size uploaded): bytes past `limit` are counted, not kept."""
    kept: list[bytes] = []
    size = 0
    while chunk := await part.read_chunk(CHUNK):
        if size + len(chunk) <= limit:
            kept.append(chunk)
        elif size < limit:
            kept.append(chunk[: limit - size])
        size += len(chunk)
    return b"".join(kept), size


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """The body, or None past `limit` (the rest read and dropped, so the client hears the 413)."""
    if request.content_length is not None and request.content_length > limit:
        await _drain(request)
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(CHUNK):
        size += len(chunk)
        if size > limit:
            await _drain(request)
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(request: web.Request) -> None:
    async for _chunk in request.content.iter_chunked(CHUNK):
        pass


def add_batch_routes(app: web.Application, host: BatchHost) -> None:
    """Register the Batch API routes of both formats and `GET /_batches` on `app`."""
    routes = BatchRoutes(host)
    for method, path, handler, anthropic in (
        ("POST", "/v1/files", routes.file_create, False),
        ("GET", "/v1/files/{file_id}", routes.file_get, False),
        ("GET", "/v1/files/{file_id}/content", routes.file_content, False),
        ("DELETE", "/v1/files/{file_id}", routes.file_delete, False),
        ("POST", "/v1/batches", routes.batch_create, False),
        ("GET", "/v1/batches", routes.batch_list, False),
        ("GET", "/v1/batches/{batch_id}", routes.batch_get, False),
        ("POST", "/v1/batches/{batch_id}/cancel", routes.batch_cancel, False),
        ("POST", "/v1/messages/batches", routes.message_batch_create, True),
        ("GET", "/v1/messages/batches", routes.message_batch_list, True),
        ("GET", "/v1/messages/batches/{batch_id}", routes.message_batch_get, True),
        ("DELETE", "/v1/messages/batches/{batch_id}", routes.message_batch_delete, True),
        ("POST", "/v1/messages/batches/{batch_id}/cancel", routes.message_batch_cancel, True),
        ("GET", "/v1/messages/batches/{batch_id}/results", routes.message_batch_results, True),
    ):
        app.router.add_route(method, path, routes.guarded(handler, anthropic))
    app.router.add_get("/_batches", routes.overview)
