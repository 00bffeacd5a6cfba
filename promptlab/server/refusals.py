"""A request refused: the exception a route raises, and the one-line answer it becomes."""

from __future__ import annotations

import json

from fastapi import Response

from promptlab.server.fairness import TooMany


class Refused(Exception):
    """A request refused with `status` and a one-line `message` (not a PromptlabError)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(status: int, message: str, kind: str | None = None) -> Response:
    """`{"error": message}` (and the error's class as `kind`, so promptlab's client
    raises the same one and exits as the command would have); ASCII-escaped, so a
    message quoting a lone surrogate a client sent is still a valid body."""
    body = json.dumps({"error": message, **({"kind": kind} if kind else {})}, ensure_ascii=True)
    return Response(body, status_code=status, media_type="application/json")


def too_many_response(exc: TooMany) -> Response:
    """A principal's bound reached (server/fairness.py): 429, with when to ask again."""
    response = error_response(429, f"{exc.message}; ask again in {exc.retry_after} s")
    response.headers["Retry-After"] = exc.retry_after
    return response
