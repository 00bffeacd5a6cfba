"""Plugins' API routes (promptlab/plugins/hookspecs.py `register_routes`), served under
`/v1/plugins/NAME/...` with the role each declares.

A plugin's route is one of the server's: the guard (principals.py) authenticates its
caller and checks the role it declared before the route runs, the access log writes its
line, and the served OpenAPI description says its role. A route whose role is not one of
viewer, editor and admin, or whose path is taken, refuses its plugin.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from promptlab.server.roles import ADMIN, EDITOR, VIEWER

#: The roles a plugin's route may need (an application's gateway token reaches none).
ROLES = (VIEWER, EDITOR, ADMIN)
METHODS = ("GET", "POST", "PUT", "DELETE")


@dataclass(frozen=True)
class PluginRoute:
    """A route a plugin adds: `endpoint` is a FastAPI endpoint (its parameters read as
    FastAPI reads them), served at `/v1/plugins/PLUGIN` + `path` for `method`."""

    method: str
    path: str
    role: str
    endpoint: Callable[..., Any]
    #: Who registered it (set by the plugin manager).
    plugin: str = "promptlab"

    def __post_init__(self) -> None:
        """Refuse (ValueError, which refuses the plugin) what the server could not serve."""
        if self.method.upper() not in METHODS:
            raise ValueError(f"route {self.path}: method {self.method!r} is not one of {METHODS}")
        if not self.path.startswith("/") or len(self.path) > 200:
            raise ValueError(f"route {self.path!r}: a path starts with / (under /v1/plugins/NAME)")
        if self.role not in ROLES:
            raise ValueError(f"route {self.path}: role {self.role!r} is not one of {ROLES}")

    @property
    def name(self) -> str:
        """Its identity: its plugin, method and path (one taken twice refuses the plugin)."""
        return f"{self.plugin} {self.method.upper()} {self.path}"


def add_plugin_routes(app: FastAPI, roles: MutableMapping[tuple[str, str], str]) -> None:
    """Serve every loaded plugin's routes, each with its role added to `roles` (the
    guard's table)."""
    from promptlab.plugins.manager import plugins

    found = plugins()
    for route in list(found.routes().values()):
        method, served = route.method.upper(), f"/v1/plugins/{route.plugin}{route.path}"
        if (method, served) in roles:
            found.refuse(route.plugin, f"route {method} {served} is taken")
            continue
        roles[(method, served)] = route.role
        app.add_api_route(served, route.endpoint, methods=[method], tags=[f"plugin {route.plugin}"])
