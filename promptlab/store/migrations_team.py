"""Migrations from 0017 on: who may act on a shared server, and changes that do not collide.

Plain (name, statements) pairs, wrapped as `Migration`s by migrations.py, whose list
they continue. Never edit one that has shipped: fix mistakes with a new one at the end.
"""

from __future__ import annotations

TEAM_MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "0017_api_tokens",
        (
            # A person's or service's token for the server's API (promptlab/server/
            # principals.py): only its SHA-256 is kept; `token_id` is its public name.
            """
            CREATE TABLE api_tokens (
                token_id    VARCHAR PRIMARY KEY,
                name        VARCHAR NOT NULL,
                role        VARCHAR NOT NULL,
                service     BOOLEAN NOT NULL,
                token_hash  VARCHAR NOT NULL UNIQUE,
                created_by  VARCHAR NOT NULL,
                created_at  TIMESTAMPTZ NOT NULL,
                revoked_by  VARCHAR,
                revoked_at  TIMESTAMPTZ
            )
            """,
        ),
    ),
)
