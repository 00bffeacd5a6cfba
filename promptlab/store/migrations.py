"""Append-only, named schema migrations, each applied once in its own transaction.

Never edit a migration that has shipped: fix mistakes with a new one at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb


@dataclass(frozen=True)
class Migration:
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_prompt_registry",
        (
            """
            CREATE TABLE prompts (
                name        VARCHAR PRIMARY KEY,
                description VARCHAR NOT NULL DEFAULT '',
                created_at  TIMESTAMPTZ NOT NULL
            )
            """,
            """
            CREATE TABLE prompt_versions (
                prompt_name VARCHAR NOT NULL,
                id          VARCHAR NOT NULL,
                semver      VARCHAR NOT NULL,
                major       INTEGER NOT NULL,
                minor       INTEGER NOT NULL,
                patch       INTEGER NOT NULL,
                content     JSON NOT NULL,
                author      VARCHAR NOT NULL,
                message     VARCHAR NOT NULL DEFAULT '',
                created_at  TIMESTAMPTZ NOT NULL,
                parent_id   VARCHAR,
                PRIMARY KEY (prompt_name, id),
                UNIQUE (prompt_name, semver)
            )
            """,
            """
            CREATE TABLE label_events (
                prompt_name VARCHAR NOT NULL,
                label       VARCHAR NOT NULL,
                version_id  VARCHAR NOT NULL,
                moved_at    TIMESTAMPTZ NOT NULL,
                actor       VARCHAR NOT NULL,
                seq         BIGINT NOT NULL,
                PRIMARY KEY (prompt_name, label, seq)
            )
            """,
        ),
    ),
)


def apply_migrations(
    conn: duckdb.DuckDBPyConnection, migrations: tuple[Migration, ...] = MIGRATIONS
) -> list[str]:
    """Apply every migration not yet recorded; return the names applied now."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations ("
        " name VARCHAR PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
    )
    done = {row[0] for row in conn.execute("SELECT name FROM _migrations").fetchall()}
    applied = []
    for migration in migrations:
        if migration.name in done:
            continue
        conn.begin()
        try:
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO _migrations VALUES (?, ?)",
                [migration.name, datetime.now(UTC)],
            )
            conn.commit()
        except Exception:
            conn.rollback()
            raise
        applied.append(migration.name)
    return applied
