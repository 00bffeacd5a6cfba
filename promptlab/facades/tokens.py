"""`wb.tokens`: who may call a shared server, each with a token of their own and a role.

A token is shown once, when it is made; the database keeps only its SHA-256. Roles are
ordered: a viewer reads, an editor also runs, edits prompts and datasets and reviews,
an admin also manages tokens and an experiment's kill switch and ramp. A service token
(a job, a bot) may act on behalf of a person it names; a person's token acts as them.
"""

from __future__ import annotations

import builtins  # `list` below names a method: annotations say builtins.list
import secrets
import threading

from promptlab.errors import ConfigError, NotFoundError
from promptlab.facades.context import Context
from promptlab.store.tokens import TokenRecord, TokenStore, token_hash

__all__ = ["GATEWAY", "ROLES", "TOKEN_ROLES", "TokenRecord", "Tokens", "role_allows"]

#: Roles, least to most: each may do what the ones before it may.
ROLES = ("viewer", "editor", "admin")
#: An application's token for the live gateway (promptlab/gateway/): it may call the
#: gateway and feedback routes and nothing else; an editor or admin may call them too.
GATEWAY = "gateway"
#: What `promptlab token create --role` takes.
TOKEN_ROLES = (*ROLES, GATEWAY)
#: Longest token name: it is recorded as the actor of what the token changes.
MAX_NAME_CHARS = 100


def role_allows(role: str, needed: str) -> bool:
    """Whether `role` may do what `needed` may (nothing, when either is not a role)."""
    if needed == GATEWAY:
        return role == GATEWAY or role_allows(role, "editor")
    return role in ROLES and needed in ROLES and ROLES.index(role) >= ROLES.index(needed)


class Tokens:
    """Create, list and revoke API tokens; find the token a caller presents."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._rows = TokenStore(context.store)
        self._lock = threading.Lock()
        #: Active tokens by hash, read once: a server checks every request against it.
        self._active: dict[str, TokenRecord] | None = None

    def create(self, name: str, role: str, *, service: bool = False) -> tuple[TokenRecord, str]:
        """A new token for `name` with `role`: its record and the token itself, which
        is shown now and never again."""
        name = name.strip()
        if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
            raise ConfigError(f"token name: 1 to {MAX_NAME_CHARS} printable characters")
        if role not in TOKEN_ROLES:
            raise ConfigError(f"--role: one of {', '.join(TOKEN_ROLES)}, got {role!r}")
        secret = f"pl_{secrets.token_urlsafe(32)}"
        token_id = f"tok_{secrets.token_hex(6)}"
        actor = self._context.author()
        record = self._rows.add(token_id, name, role, service, secret, actor)
        self._context.audit_change(
            "token.created",
            actor,
            {"token_id": token_id, "name": name, "role": role, "service": service},
        )
        self._forget()
        return record, secret

    def list(self) -> builtins.list[TokenRecord]:
        """Every token, revoked ones too, oldest first."""
        return self._rows.all()

    def revoke(self, token_id: str) -> TokenRecord:
        actor = self._context.author()
        record = self._rows.revoke(token_id, actor)
        if record is None:
            raise NotFoundError(f"no active token {token_id!r} (`promptlab token list`)")
        self._context.audit_change(
            "token.revoked", actor, {"token_id": token_id, "name": record.name}
        )
        self._forget()
        return record

    def find(self, secret: str) -> TokenRecord | None:
        """The active token `secret` is, or None."""
        with self._lock:
            if self._active is None:
                self._active = self._rows.active_by_hash()
            return self._active.get(token_hash(secret))

    def active_by_hash(self) -> dict[str, TokenRecord]:
        """Every active token by its SHA-256 (what the gateways' snapshot carries)."""
        with self._lock:
            if self._active is None:
                self._active = self._rows.active_by_hash()
            return dict(self._active)

    def _forget(self) -> None:
        with self._lock:
            self._active = None
