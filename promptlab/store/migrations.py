"""Append-only, named schema migrations, each applied once in its own transaction.

Never edit a migration that has shipped: fix mistakes with a new one at the end.
The list starts here (0001 to 0008) and goes on in migrations_audit_review.py (0009 to
0016) and migrations_team.py (0017 on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import duckdb

from promptlab.clock import SYSTEM_CLOCK
from promptlab.errors import StoreError
from promptlab.store.migrations_audit_review import AUDIT_REVIEW_MIGRATIONS
from promptlab.store.migrations_team import TEAM_MIGRATIONS


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
    Migration(
        "0002_runs",
        (
            # One row per run; the lifecycle columns are set as the run moves on.
            """
            CREATE TABLE runs (
                run_id        VARCHAR PRIMARY KEY,
                name          VARCHAR NOT NULL,
                spec          JSON NOT NULL,
                status        VARCHAR NOT NULL,
                status_reason VARCHAR,
                total_items   BIGINT NOT NULL DEFAULT 0,
                submitted_at  TIMESTAMPTZ NOT NULL,
                scheduled_at  TIMESTAMPTZ,
                started_at    TIMESTAMPTZ,
                finished_at   TIMESTAMPTZ,
                updated_at    TIMESTAMPTZ NOT NULL
            )
            """,
            # Every lifecycle change, resumes included, with its timestamp.
            """
            CREATE TABLE run_events (
                run_id  VARCHAR NOT NULL,
                seq     INTEGER NOT NULL,
                status  VARCHAR NOT NULL,
                reason  VARCHAR,
                changed_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (run_id, seq)
            )
            """,
            # The resolved variants: the template content is kept so resume needs no registry.
            """
            CREATE TABLE run_variants (
                run_id            VARCHAR NOT NULL,
                variant_index     INTEGER NOT NULL,
                name              VARCHAR NOT NULL,
                prompt_ref        VARCHAR NOT NULL,
                prompt_version_id VARCHAR NOT NULL,
                endpoint          VARCHAR NOT NULL,
                model             VARCHAR NOT NULL,
                params            JSON NOT NULL,
                template          JSON NOT NULL,
                PRIMARY KEY (run_id, variant_index)
            )
            """,
            # Dataset rows copied at planning time; no index, zone maps on row_index suffice.
            """
            CREATE TABLE run_rows (
                run_id     VARCHAR NOT NULL,
                row_index  BIGINT NOT NULL,
                row_values JSON NOT NULL
            )
            """,
            """
            CREATE TABLE items (
                idempotency_key VARCHAR PRIMARY KEY,
                run_id          VARCHAR NOT NULL,
                seq             BIGINT NOT NULL,
                row_index       BIGINT NOT NULL,
                variant_index   INTEGER NOT NULL,
                repeat          INTEGER NOT NULL,
                status          VARCHAR NOT NULL,
                error_kind      VARCHAR,
                attempts        INTEGER NOT NULL DEFAULT 0,
                updated_at      TIMESTAMPTZ
            )
            """,
            """
            CREATE TABLE attempts (
                idempotency_key VARCHAR NOT NULL,
                run_id          VARCHAR NOT NULL,
                attempt         INTEGER NOT NULL,
                started_at      TIMESTAMPTZ NOT NULL,
                ended_at        TIMESTAMPTZ NOT NULL,
                outcome         VARCHAR NOT NULL,
                error_kind      VARCHAR,
                http_status     INTEGER,
                error_message   VARCHAR,
                wait_ms         DOUBLE NOT NULL,
                wait_reason     VARCHAR,
                retry_after_s   DOUBLE,
                latency_ms      DOUBLE
            )
            """,
            # Exactly one final row per item. The writer keeps that (only items not yet
            # final get one), not an index: a key index cost ~150 MB per million results.
            """
            CREATE TABLE results (
                idempotency_key   VARCHAR NOT NULL,
                run_id            VARCHAR NOT NULL,
                seq               BIGINT NOT NULL,
                row_index         BIGINT NOT NULL,
                variant           VARCHAR NOT NULL,
                repeat            INTEGER NOT NULL,
                status            VARCHAR NOT NULL,
                error_kind        VARCHAR,
                error_message     VARCHAR,
                prompt_version_id VARCHAR NOT NULL,
                endpoint          VARCHAR NOT NULL,
                model             VARCHAR NOT NULL,
                params            JSON,
                output_text       VARCHAR,
                input_tokens      INTEGER,
                output_tokens     INTEGER,
                finish_reason     VARCHAR,
                model_version     VARCHAR,
                latency_ms        DOUBLE,
                cost_usd          DOUBLE,
                attempts          INTEGER NOT NULL,
                finished_at       TIMESTAMPTZ NOT NULL
            )
            """,
        ),
    ),
    Migration(
        "0003_datasets",
        (
            # One row per imported dataset; `columns` is a JSON list of {name, type}.
            """
            CREATE TABLE datasets (
                name        VARCHAR PRIMARY KEY,
                source      VARCHAR NOT NULL,
                format      VARCHAR NOT NULL,
                row_count   BIGINT NOT NULL,
                columns     JSON NOT NULL,
                unit_column VARCHAR,
                imported_at TIMESTAMPTZ NOT NULL,
                author      VARCHAR NOT NULL
            )
            """,
            # Rows of every dataset, 1-based in file order. No key index (it would stay
            # in memory, ~100 bytes a row): rows are inserted in order, so zone maps on
            # row_number find a range.
            """
            CREATE TABLE dataset_rows (
                dataset    VARCHAR NOT NULL,
                row_number BIGINT NOT NULL,
                row_values JSON NOT NULL
            )
            """,
        ),
    ),
    Migration(
        "0004_experiments",
        (
            # One row per experiment: its salt never changes, so assignments stay sticky.
            """
            CREATE TABLE experiments (
                name        VARCHAR PRIMARY KEY,
                salt        VARCHAR NOT NULL,
                created_at  TIMESTAMPTZ NOT NULL,
                created_by  VARCHAR NOT NULL
            )
            """,
            # Every change is a new revision; `config` is the exported form (JSON).
            """
            CREATE TABLE experiment_revisions (
                name        VARCHAR NOT NULL,
                revision    INTEGER NOT NULL,
                config      JSON NOT NULL,
                author      VARCHAR NOT NULL,
                created_at  TIMESTAMPTZ NOT NULL,
                note        VARCHAR NOT NULL DEFAULT '',
                PRIMARY KEY (name, revision)
            )
            """,
            # Units served a variant by live traffic (imported from exposure logs).
            """
            CREATE TABLE exposures (
                experiment        VARCHAR NOT NULL,
                revision          INTEGER NOT NULL,
                unit_id           VARCHAR NOT NULL,
                variant           VARCHAR NOT NULL,
                bucket            INTEGER NOT NULL,
                prompt_version_id VARCHAR NOT NULL,
                source            VARCHAR NOT NULL,
                exposed_at        TIMESTAMPTZ NOT NULL,
                imported_at       TIMESTAMPTZ NOT NULL
            )
            """,
            # What a split run decided for each dataset row, recorded with its plan.
            """
            CREATE TABLE assignments (
                run_id        VARCHAR NOT NULL,
                experiment    VARCHAR NOT NULL,
                revision      INTEGER NOT NULL,
                unit_id       VARCHAR NOT NULL,
                row_index     BIGINT NOT NULL,
                variant       VARCHAR NOT NULL,
                bucket        INTEGER NOT NULL,
                in_experiment BOOLEAN NOT NULL
            )
            """,
        ),
    ),
    Migration(
        "0005_output_checks",
        (
            # What the output check found for a succeeded result (promptlab.checks.validation):
            # valid, repaired, invalid, truncated or no_schema; NULL on rows stored before
            # checks existed and on failed items. `check_errors` is a JSON list of
            # `PATH: message` strings. `rule_status` is passed, warned or failed (a rule of
            # severity error failed or raised) for outputs checked against rules;
            # `rule_errors` a JSON list of `RULE: why` strings.
            "ALTER TABLE results ADD COLUMN check_status VARCHAR",
            "ALTER TABLE results ADD COLUMN check_errors JSON",
            "ALTER TABLE results ADD COLUMN rule_status VARCHAR",
            "ALTER TABLE results ADD COLUMN rule_errors JSON",
        ),
    ),
    Migration(
        "0006_alerts",
        (
            # Anomalies seen in a run's results (promptlab.checks.anomalies), raised live by the
            # engine or by an after-run pass; rows are only added, or replaced per run
            # as a whole when the pass is run again.
            """
            CREATE TABLE alerts (
                run_id     VARCHAR NOT NULL,
                variant    VARCHAR NOT NULL,
                kind       VARCHAR NOT NULL,
                message    VARCHAR NOT NULL,
                first_seq  BIGINT NOT NULL,
                last_seq   BIGINT NOT NULL,
                raised_at  TIMESTAMPTZ NOT NULL
            )
            """,
        ),
    ),
    Migration(
        "0007_reask_attempts",
        (
            # True on an attempt that was a follow-up turn asking the model to fix an
            # output that failed its check (a run spec's `reask`); NULL on older rows.
            "ALTER TABLE attempts ADD COLUMN reask BOOLEAN",
        ),
    ),
    Migration(
        "0008_feedback",
        (
            # What users did with outputs (promptlab.data.feedback): one row per event. A row
            # names a result (its idempotency key, with the run, variant and version read
            # from `results` at import), or only a prompt version and a unit (NULL key,
            # run and variant). `kind` is impression, click, thumbs_up, thumbs_down or
            # completed; `source` the file name, or 'app' for a rating in the app.
            """
            CREATE TABLE feedback (
                idempotency_key   VARCHAR,
                run_id            VARCHAR,
                prompt_version_id VARCHAR NOT NULL,
                variant           VARCHAR,
                unit_id           VARCHAR,
                kind              VARCHAR NOT NULL,
                value             DOUBLE NOT NULL DEFAULT 1,
                event_time        TIMESTAMPTZ NOT NULL,
                source            VARCHAR NOT NULL,
                imported_at       TIMESTAMPTZ NOT NULL
            )
            """,
            # Production requests, one row per request, with the prompt version that
            # served it (resolved from the log's version reference at import).
            """
            CREATE TABLE production_logs (
                prompt_version_id VARCHAR NOT NULL,
                unit_id           VARCHAR,
                latency_ms        DOUBLE,
                clicked           BOOLEAN,
                completed         BOOLEAN,
                event_time        TIMESTAMPTZ NOT NULL,
                source            VARCHAR NOT NULL,
                imported_at       TIMESTAMPTZ NOT NULL
            )
            """,
        ),
    ),
) + tuple(
    Migration(name, statements) for name, statements in AUDIT_REVIEW_MIGRATIONS + TEAM_MIGRATIONS
)


def migration_state(
    conn: duckdb.DuckDBPyConnection, migrations: tuple[Migration, ...] = MIGRATIONS
) -> tuple[list[str], list[Migration]]:
    """(the migrations the database has, those it lacks), in order; a StoreError, in one
    line naming both, when it has one this promptlab does not know (a newer one made it)."""
    found = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = '_migrations'"
    ).fetchone()
    if not found or not found[0]:
        return [], list(migrations)
    done = [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY name").fetchall()]
    known = {m.name for m in migrations}
    unknown = [name for name in done if name not in known]
    if unknown:
        raise StoreError(
            f"the database was made by a newer promptlab (its migration {unknown[-1]} is "
            f"unknown here; this one knows up to {migrations[-1].name}): upgrade promptlab, "
            "or open a backup made before"
        )
    return done, [m for m in migrations if m.name not in set(done)]


def apply_migrations(
    conn: duckdb.DuckDBPyConnection,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    now: Callable[[], datetime] = SYSTEM_CLOCK.now,
) -> list[str]:
    """Apply every migration not yet recorded; return the names applied now."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations ("
        " name VARCHAR PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
    )
    done = {row[0] for row in conn.execute("SELECT name FROM _migrations").fetchall()}
    pending = [m for m in migrations if m.name not in done]
    # A new database takes them all in one transaction: one commit (and WAL sync), not
    # one per migration, before a command's first write. An existing one is moved a
    # migration at a time, as each was written against the one before.
    groups = [pending] if pending and not done else [[m] for m in pending]
    for group in groups:
        conn.begin()
        try:
            for migration in group:
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO _migrations VALUES (?, ?)",
                    [migration.name, now()],
                )
            conn.commit()
        except Exception:
            conn.rollback()
            raise
    return [m.name for m in pending]
