"""`/v1/review/...`: the review queue (`promptlab review ...`): list, show, decide,
reopen, add rows (the export is a job: server/job_routes.py). Answers are the
facade's records (server/typed.py)."""

from __future__ import annotations

from fastapi import FastAPI, Response
from pydantic import BaseModel, Field

from promptlab.records.review import ReviewDetail, ReviewItem, ReviewList
from promptlab.server.answers import typed_response
from promptlab.workbench import Workbench


class DecisionIn(BaseModel):
    """A decision on an item: the version its maker saw (None: as it is now)."""

    note: str | None = None
    version: int | None = Field(None, ge=0)
    answer: str | None = Field(None, description="The corrected answer (correct only).")


class AddIn(BaseModel):
    """Rows of a run sent to review: by number, and/or those that failed their checks
    or that its anomaly alerts were about."""

    run_id: str
    rows: list[int] = Field(
        default_factory=list,
        max_length=10_000,
        description="Rows by row_index, from 0: a person's row N (pages, CLI, an "
        "export's row_number) is row_index N-1.",
    )
    failed_checks: bool = False
    alerts: bool = False
    reason: str = "sent by hand"


def _item(item: ReviewItem) -> Response:
    return typed_response(ReviewItem, item)


def add_review_routes(app: FastAPI, wb: Workbench) -> None:
    @app.get("/v1/review/items")
    def list_items(
        status: str | None = "open", run_id: str | None = None, limit: int = 50
    ) -> Response:
        """Items oldest first (`status=all`: every status), and the counts per status."""
        wanted = None if status == "all" else status
        items = wb.review.list(wanted, run_id, min(max(limit, 1), 10_000))
        return typed_response(ReviewList, (items, wb.review.counts()))

    @app.get("/v1/review/items/{item_id}")
    def show_item(item_id: int) -> Response:
        """The item, its dataset row, and every model's answer with its scores."""
        return typed_response(ReviewDetail, wb.review.show(item_id))

    @app.post("/v1/review/items/{item_id}/{decision}")
    def decide(item_id: int, decision: str, body: DecisionIn) -> Response:
        """accept, correct (with `answer`), reject, or reopen the item."""
        if decision == "accept":
            return _item(wb.review.accept(item_id, body.note, version=body.version))
        if decision == "correct":
            answer = body.answer or ""
            return _item(wb.review.correct(item_id, answer, body.note, version=body.version))
        if decision == "reject":
            return _item(wb.review.reject(item_id, body.note, version=body.version))
        if decision == "reopen":
            return _item(wb.review.reopen(item_id, body.note, version=body.version))
        from promptlab.errors import ReviewError

        raise ReviewError(f"review: no decision {decision!r} (accept, correct, reject, reopen)")

    @app.post("/v1/review/add")
    def add_rows(body: AddIn) -> list[int]:
        """The ids of the items opened (rows already in the queue stay as they are)."""
        ids = wb.review.add(body.run_id, body.rows, body.reason) if body.rows else []
        if body.failed_checks:
            ids += wb.review.add_failed_checks(body.run_id)
        if body.alerts:
            ids += wb.review.add_alerted(body.run_id)
        return ids
