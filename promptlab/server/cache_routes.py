"""`/v1/cache`: the response cache's stats and its clearing (`promptlab cache stats|clear`),
so the cache commands work while a server or the app owns the database. Answers are the
facade's records (server/typed.py): the CLI prints them as it does on its own."""

from __future__ import annotations

from fastapi import FastAPI, Header, Request, Response
from pydantic import BaseModel, Field

from promptlab.records.cache import CacheStats
from promptlab.server.answers import Submits, request_once, typed_response
from promptlab.store.idempotency import IdempotencyKeys
from promptlab.workbench import Workbench


class ClearIn(BaseModel):
    """Which entries to remove: all, or those stored longer ago than `older_than`."""

    older_than: str | None = Field(
        None, max_length=100, description="30d, 12h, 2w, or a date; none: every entry."
    )


def add_cache_routes(app: FastAPI, wb: Workbench) -> None:
    # A clear retried with its Idempotency-Key (a dropped connection) answers the count
    # the first one removed, not the 0 a second clear would.
    clears: Submits[int] = Submits(int, IdempotencyKeys(wb.store))

    @app.get("/v1/cache")
    def cache_stats() -> Response:
        """Entries, bytes, answers given from the cache, oldest and newest, in all and per
        endpoint and model."""
        return typed_response(CacheStats, wb.cache.stats())

    @app.post("/v1/cache/clear")
    def clear_cache(
        request: Request, body: ClearIn, idempotency_key: str | None = Header(None)
    ) -> Response:
        """Remove every entry, or those older than `older_than`; answers how many were
        removed (results stay). Recorded as a `cache.cleared` change event."""

        def clear() -> int:
            return wb.cache.clear(body.older_than)

        removed = request_once(clears, request, idempotency_key, body.model_dump_json(), clear)
        return typed_response(int, removed)
