"""What the facades of one workbench share: its database, settings, registry and engine.

Private to `promptlab.facades`: `Workbench` builds one and hands it to each facade, so
every change is audited, and everything shown or exported is masked, the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from promptlab.audit.actor import current_actor
from promptlab.audit.redact import Redactor, secret_values, watch_env
from promptlab.config import Settings
from promptlab.engine import Engine
from promptlab.errors import ConfigError
from promptlab.prompts.registry import Registry, SaveResult
from promptlab.providers.config import load_endpoints
from promptlab.store import ReadModels, Store
from promptlab.store.audit import AuditLog

__all__ = ["Context"]


class Context:
    """The store and its readers, the settings, the registry, the engine, and the audit
    and masking rules every facade applies."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        registry: Registry,
        *,
        engine: Callable[[], Engine],
        started_engine: Callable[[], Engine | None],
    ) -> None:
        self.store = store
        self.settings = settings
        #: Versions, labels, references and diffs: the registry's rules.
        self.registry = registry
        self.reads = ReadModels(store)
        self.audit_log = AuditLog(store)
        #: The shared engine, started on first use (reading reports needs none).
        self.engine = engine
        #: The engine if something started it, else None (live figures of active runs).
        self.started_engine = started_engine

    def author(self) -> str:
        """Who a change is recorded for: the person acting (promptlab.audit.actor),
        else the process's author."""
        return current_actor(self.settings.author)

    def audit_change(
        self, kind: str, actor: str, payload: Mapping[str, Any], *, run_id: str | None = None
    ) -> None:
        """Record a change event (kind like ``feedback.imported``) unless the audit is off.

        The one hook every change goes through: facades call it after they change
        something (imports, exports), with the actor who did it.
        """
        if self.settings.audit:
            self.audit_log.record_change(kind, actor, payload, run_id=run_id)

    def audit_saved(self, result: SaveResult, author: str | None = None) -> None:
        """A ``prompt_version.created`` event for a save that made a new version."""
        if result.created:
            v = result.version
            self.audit_change(
                "prompt_version.created",
                author or self.author(),
                {"prompt": v.prompt_name, "version_id": v.id, "ref": v.ref, "bump": result.bump},
            )

    def secrets(self) -> list[str]:
        """Values no exported file may hold: keys in the environment and the endpoints'
        `api_key_env` variables, whatever they are called."""
        # A broken providers file: the variables named like *_KEY, *_TOKEN... still count.
        with contextlib.suppress(ConfigError):
            endpoints = load_endpoints(self.settings.providers_file)
            watch_env(c.api_key_env for c in endpoints.values())
        return secret_values()

    def redactor(self) -> Redactor:
        """Masks what nothing shown may hold: the secret values no export holds (the
        providers file's key variables among them) and every credential-shaped string."""
        return Redactor(self.secrets())
