"""Who is calling: the principal behind a request's token, and what each route needs.

Every request but the OpenAPI description presents a token. The owner's token (the one
in the discovery file, held by whoever started the server) is an admin service named
after the server's author; every other token is one `promptlab token create` made. The
guard resolves the principal, refuses a route its role may not call, holds the caller
to its share of the server (fairness.py: a 429 past it), and runs the route acting as
the principal, so what it changes is recorded for them.
"""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from promptlab.audit.actor import acting_as
from promptlab.facades.tokens import role_allows
from promptlab.server.fairness import THREADS, Fairness, TooMany
from promptlab.server.refusals import error_response, too_many_response
from promptlab.server.roles import GATEWAY, PUBLIC_PATHS, ROUTE_ROLES
from promptlab.workbench import Workbench

#: The token id of the owner's token (it is not in the database: it lives in the file).
OWNER_TOKEN_ID = "owner"


@dataclass(frozen=True)
class Principal:
    """A token's holder: its name, role, whether it is a service, and the token's id."""

    name: str
    role: str
    service: bool
    token_id: str

    def actor(self, named: str | None) -> str:
        """Who a change is recorded for. A service may act on behalf of the person a
        request names (`SERVICE on behalf of NAME`); a person's token is that person,
        whatever a request says."""
        if self.service and named and named != self.name:
            return f"{self.name} on behalf of {named}"
        return self.name


def principal_of(scope: Scope) -> Principal:
    """The principal the guard found for this request (routes read it from here)."""
    principal = scope.get("state", {}).get("principal")
    assert isinstance(principal, Principal), "the route is not behind the guard"
    return principal


class Guard:
    """Pure ASGI middleware: authenticate, authorize by ROUTE_ROLES, act as the caller.

    A route missing from ROUTE_ROLES is refused (closed by default); unknown paths and
    wrong methods pass to the router's 404 and 405 once the caller is known.
    """

    def __init__(
        self,
        app: ASGIApp,
        wb: Workbench,
        owner_token: str,
        routes: Callable[[], list[Any]],
        fairness: Fairness,
        roles: Mapping[tuple[str, str], str] = ROUTE_ROLES,
    ) -> None:
        self.app = app
        self.fairness = fairness
        self._pool_sized = False
        self.wb = wb
        self.owner_token = owner_token
        self.owner = Principal(wb.settings.author, "admin", True, OWNER_TOKEN_ID)
        self.routes = routes
        #: The role each route needs: ROUTE_ROLES, and plugin routes' (plugin_routes.py).
        self.roles = roles
        self._static: dict[tuple[str, str], str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        principal = self._principal(_header_text(headers.get(b"authorization", b"")))
        if principal is None:
            refusal = error_response(401, "missing or wrong token (Authorization: Bearer TOKEN)")
            await refusal(scope, receive, send)
            return
        needed = self._needed_role(scope)
        if needed is not None and not role_allows(principal.role, needed):
            refusal = error_response(
                403,
                f"{principal.name} is a {principal.role}; {scope['method']} "
                f"{scope['path']} needs {needed}",
            )
            await refusal(scope, receive, send)
            return
        try:
            release = self.fairness.admit(principal.token_id, live=principal.role == GATEWAY)
        except TooMany as exc:
            await too_many_response(exc)(scope, receive, send)
            return
        self._size_pool()
        scope.setdefault("state", {})["principal"] = principal
        raw = headers.get(b"promptlab-author")
        # Percent-encoded by promptlab's client (a header is Latin-1): `Jos%C3%A9`.
        named = urllib.parse.unquote(_header_text(raw)) if raw else None
        # Route handlers run on the thread pool with a copy of this context.
        try:
            with acting_as(principal.actor(named)):
                await self.app(scope, receive, send)
        finally:
            release()

    def _size_pool(self) -> None:
        """The route handlers' thread pool at fairness.THREADS (set on the server's loop,
        where anyio keeps it)."""
        if not self._pool_sized:
            anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
            self._pool_sized = True

    def _principal(self, authorization: str) -> Principal | None:
        given = authorization.removeprefix("Bearer ").strip()
        if not given:
            return None
        if secrets.compare_digest(given.encode(), self.owner_token.encode()):
            return self.owner
        record = self.wb.tokens.find(given)
        if record is None:
            return None
        return Principal(record.name, record.role, record.service, record.token_id)

    def _needed_role(self, scope: Scope) -> str | None:
        # A route without parameters is found by its path at once (`/v1/assign` is
        # called per request by services); others by matching each route in turn.
        static = self._static_roles()
        found = static.get((str(scope["method"]), str(scope["path"])))
        return found if found is not None else self._matched_role(scope)

    def _static_roles(self) -> dict[tuple[str, str], str]:
        if self._static is None:
            self._static = {
                (method, path): role
                for (method, path), role in self.roles.items()
                if "{" not in path
            }
        return self._static

    def _matched_role(self, scope: Scope) -> str | None:
        """The role the route needs (UNDECLARED, which no role has, for a route missing
        from the table); None for unknown paths and wrong methods (the router's 404/405)."""
        for route in self.routes():
            match, _ = route.matches(scope)
            if match == Match.FULL:
                path = str(getattr(route, "path", scope["path"]))
                return self.roles.get((str(scope["method"]), path), UNDECLARED)
        return None


#: What an undeclared route needs: more than any role has, so it is refused.
UNDECLARED = "undeclared"


def _header_text(raw: bytes) -> str:
    """A header's text: UTF-8 when it is (a client that did not encode it), else Latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
