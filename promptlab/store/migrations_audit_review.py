"""Migrations 0009 to 0016: the audit trail and its anchors, run owners, schedules and
`after:`, scores, cross-checks and the review queue, conversations and context shards.

Plain (name, statements) pairs, wrapped as `Migration`s by migrations.py, whose list
they continue (before migrations_team.py's). Never edit one that has shipped: fix
mistakes with a new one at the end.
"""

from __future__ import annotations

AUDIT_REVIEW_MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "0009_audit",
        (
            # The audit trail (promptlab/audit/chain.py): append-only, hash-chained per chain
            # (`changes`, or `run:<run_id>` for a run's item traces). No key constraint
            # on (chain, seq) on purpose: verification, not the schema, reports a row
            # inserted out of place, and inserts stay cheap.
            """
            CREATE TABLE audit_events (
                chain     VARCHAR NOT NULL,
                seq       BIGINT NOT NULL,
                event_id  VARCHAR NOT NULL,
                trace_id  VARCHAR,
                run_id    VARCHAR,
                kind      VARCHAR NOT NULL,
                actor     VARCHAR NOT NULL,
                "at"      TIMESTAMPTZ NOT NULL,
                payload   JSON NOT NULL,
                prev_hash VARCHAR NOT NULL,
                hash      VARCHAR NOT NULL
            )
            """,
        ),
    ),
    (
        "0010_audit_anchors",
        (
            # Each chain's head (its last seq and hash), moved by every append in the
            # transaction that stores the events (promptlab/store/audit.py): verify
            # then catches a chain whose newest events were deleted, or every event.
            """
            CREATE TABLE audit_anchors (
                chain     VARCHAR PRIMARY KEY,
                head_seq  BIGINT NOT NULL,
                head_hash VARCHAR NOT NULL
            )
            """,
            # Chains written before anchors are pinned as they stand at the upgrade.
            """
            INSERT INTO audit_anchors
            SELECT chain, max(seq), arg_max(hash, seq) FROM audit_events GROUP BY chain
            """,
        ),
    ),
    (
        "0011_run_owner",
        (
            # The process that last submitted, scheduled or started the run (host, pid
            # and a token of that process): a live run whose owner is not the reading
            # process is one whose process is gone (DuckDB lets one process in).
            "ALTER TABLE runs ADD COLUMN owner VARCHAR",
        ),
    ),
    (
        "0012_schedules",
        (
            # A run's `after:` names, each resolved at submit to the newest run of that
            # name: the run waits until they complete (promptlab/engine/plan/dependencies.py).
            """
            CREATE TABLE run_dependencies (
                run_id     VARCHAR NOT NULL,
                name       VARCHAR NOT NULL,
                depends_on VARCHAR NOT NULL,
                PRIMARY KEY (run_id, name)
            )
            """,
            # Run specs submitted on a cron schedule by the owner's scheduler
            # (promptlab/schedules/); `next_at` is NULL while paused.
            """
            CREATE TABLE schedules (
                name        VARCHAR PRIMARY KEY,
                cron        VARCHAR NOT NULL,
                spec        JSON NOT NULL,
                paused      BOOLEAN NOT NULL DEFAULT false,
                next_at     TIMESTAMPTZ,
                last_at     TIMESTAMPTZ,
                last_run_id VARCHAR,
                last_error  VARCHAR,
                author      VARCHAR NOT NULL,
                created_at  TIMESTAMPTZ NOT NULL,
                updated_at  TIMESTAMPTZ NOT NULL
            )
            """,
        ),
    ),
    (
        "0013_scores",
        (
            # Each finished result's score per scorer against the row's expected answer
            # (promptlab/evaluation/); a run's rows are replaced whole when it is scored again.
            """
            CREATE TABLE scores (
                idempotency_key   VARCHAR NOT NULL,
                run_id            VARCHAR NOT NULL,
                variant           VARCHAR NOT NULL,
                prompt_version_id VARCHAR NOT NULL,
                row_index         BIGINT NOT NULL,
                scorer            VARCHAR NOT NULL,
                value             DOUBLE,
                status            VARCHAR NOT NULL,
                detail            VARCHAR
            )
            """,
        ),
    ),
    (
        "0014_crosscheck_review",
        (
            # A cross-checked run's decision per row, with every model's answer,
            # confidence and weight that made it (promptlab/evaluation/crosscheck.py).
            """
            CREATE TABLE crosscheck_decisions (
                run_id     VARCHAR NOT NULL,
                row_index  BIGINT NOT NULL,
                decision   VARCHAR NOT NULL,
                answer     VARCHAR,
                agreement  DOUBLE NOT NULL,
                confidence DOUBLE,
                inputs     JSON NOT NULL,
                entropy_gap DOUBLE,
                ambiguous  BOOLEAN NOT NULL,
                decided_at TIMESTAMPTZ NOT NULL
            )
            """,
            # Each model's weight in a cross-checked run: its F1 on the validation run
            # (NULL without one), the share that gives, and the share after the ±5% rule.
            """
            CREATE TABLE crosscheck_weights (
                run_id            VARCHAR NOT NULL,
                variant           VARCHAR NOT NULL,
                validation_run_id VARCHAR,
                f1                DOUBLE,
                base_weight       DOUBLE NOT NULL,
                weight            DOUBLE NOT NULL,
                PRIMARY KEY (run_id, variant)
            )
            """,
            # A result's mean token entropy, when its request asked for log-probabilities.
            "ALTER TABLE results ADD COLUMN token_entropy DOUBLE",
            "CREATE SEQUENCE review_ids START 1",
            # Rows sent to a person (by a cross-check, failed checks, an alert or by hand):
            # one per run row; `answer` is what the person settled on.
            """
            CREATE TABLE review_items (
                id              BIGINT PRIMARY KEY DEFAULT nextval('review_ids'),
                run_id          VARCHAR NOT NULL,
                row_index       BIGINT NOT NULL,
                idempotency_key VARCHAR,
                source          VARCHAR NOT NULL,
                reason          VARCHAR NOT NULL,
                proposed        VARCHAR,
                status          VARCHAR NOT NULL,
                answer          VARCHAR,
                note            VARCHAR,
                created_by      VARCHAR NOT NULL,
                created_at      TIMESTAMPTZ NOT NULL,
                decided_by      VARCHAR,
                decided_at      TIMESTAMPTZ,
                UNIQUE (run_id, row_index)
            )
            """,
        ),
    ),
    (
        "0015_conversations",
        (
            # A conversation log's columns ({session, order, role, content}); NULL for a
            # table of rows (promptlab/conversations/replay.py).
            "ALTER TABLE datasets ADD COLUMN conversation JSON",
        ),
    ),
    (
        "0016_context_shards",
        (
            # A replayed session's history cut to fit a model's window (conversations/shards.py),
            # per run, variant and repeat; `summary` is what the shards before carry into
            # this one. Rows past `expires_at` are deleted (engine/send/sharding.py).
            """
            CREATE TABLE shards (
                shard_id        VARCHAR PRIMARY KEY,
                run_id          VARCHAR NOT NULL,
                session_id      VARCHAR NOT NULL,
                variant         VARCHAR NOT NULL,
                repeat          INTEGER NOT NULL,
                seq_no          INTEGER NOT NULL,
                is_final        BOOLEAN NOT NULL,
                first_message   INTEGER NOT NULL,
                last_message    INTEGER NOT NULL,
                tokens          INTEGER NOT NULL,
                cut             VARCHAR NOT NULL,
                summary         VARCHAR,
                summary_version_id VARCHAR,
                summary_tokens  INTEGER,
                summary_cost_usd DOUBLE,
                created_at      TIMESTAMPTZ NOT NULL,
                expires_at      TIMESTAMPTZ NOT NULL
            )
            """,
            # The shard a replayed turn was sent with; NULL when its history fit whole.
            "ALTER TABLE results ADD COLUMN shard_id VARCHAR",
        ),
    ),
)
