"""API tokens in DuckDB: only each token's SHA-256 is kept, never the token itself."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from promptlab.store.connection import Store

_COLUMNS = "token_id, name, role, service, created_by, created_at, revoked_by, revoked_at"


@dataclass(frozen=True)
class TokenRecord:
    """A token as listed: who it is for and what it may do, never its secret."""

    token_id: str
    name: str
    role: str
    service: bool
    created_by: str
    created_at: datetime
    revoked_by: str | None
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def as_dict(self) -> dict[str, Any]:
        """As the API answers it (and the CLI prints it either way)."""
        return {**dataclasses.asdict(self), "active": self.active}


def token_hash(secret: str) -> str:
    """What is stored of a token. A plain SHA-256 suffices: tokens are 256 random bits,
    not passwords, so there is nothing to guess that a slow hash would protect."""
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenStore:
    """Reads and writes of `api_tokens`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def add(
        self, token_id: str, name: str, role: str, service: bool, secret: str, created_by: str
    ) -> TokenRecord:
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            tx.execute(
                f"INSERT INTO api_tokens ({_COLUMNS}, token_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, ?)",
                [token_id, name, role, service, created_by, now, token_hash(secret)],
            )
        return TokenRecord(token_id, name, role, service, created_by, now, None, None)

    def all(self) -> list[TokenRecord]:
        with self.store.read() as cur:
            rows = cur.execute(f"SELECT {_COLUMNS} FROM api_tokens ORDER BY created_at").fetchall()
        return [TokenRecord(*row) for row in rows]

    def active_by_hash(self) -> dict[str, TokenRecord]:
        """Every token not revoked, by its hash: what a server checks callers against."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT token_hash, {_COLUMNS} FROM api_tokens WHERE revoked_at IS NULL"
            ).fetchall()
        return {str(row[0]): TokenRecord(*row[1:]) for row in rows}

    def revoke(self, token_id: str, revoked_by: str) -> TokenRecord | None:
        """Revoke the token; None when there is no active token of that id."""
        now = self.store.clock.now()
        with self.store.transaction() as tx:
            found = tx.execute(
                "UPDATE api_tokens SET revoked_by = ?, revoked_at = ? "
                f"WHERE token_id = ? AND revoked_at IS NULL RETURNING {_COLUMNS}",
                [revoked_by, now, token_id],
            ).fetchone()
        return TokenRecord(*found) if found else None
