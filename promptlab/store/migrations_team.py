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
    (
        "0018_review_item_versions",
        (
            # A review item's version counts its changes (decisions and reopens): a
            # decision names the version its decider saw, and a stale one is refused
            # (promptlab/facades/review.py). changed_by/changed_at say who made the
            # latest change: a reopen clears decided_by, and a refusal must still name
            # someone. Labels and experiments need no column: a label's moves and an
            # experiment's revisions are already numbered rows with their actor and time.
            "ALTER TABLE review_items ADD COLUMN version BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE review_items ADD COLUMN changed_by VARCHAR",
            "ALTER TABLE review_items ADD COLUMN changed_at TIMESTAMPTZ",
            # Items settled before versions existed: one change each, by their decider.
            "UPDATE review_items SET version = 1, changed_by = decided_by, "
            "changed_at = decided_at WHERE decided_by IS NOT NULL",
        ),
    ),
    (
        "0019_after_run",
        (
            # What a run's end set going (promptlab/evaluation/ended.py), one row per run and
            # piece of work: its state, the line saying why it failed, and the run it
            # started (a judge's, a validation's). The key is what makes a second end of
            # the same run find a judge run already started and leave it alone.
            """
            CREATE TABLE after_run (
                run_id        VARCHAR NOT NULL,
                work          VARCHAR NOT NULL,
                state         VARCHAR NOT NULL,
                detail        VARCHAR,
                child_run_id  VARCHAR,
                updated_at    TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (run_id, work)
            )
            """,
        ),
    ),
    (
        "0020_result_logprobs",
        (
            # What a run's perplexity needs per result (promptlab/analysis/repeats.py):
            # the mean log-probability of the output's chosen tokens and how many tokens
            # it is over, when the endpoint gave log-probabilities (NULL when it did not,
            # and on results stored before; shown as "-", never as 0).
            "ALTER TABLE results ADD COLUMN logprob_mean DOUBLE",
            "ALTER TABLE results ADD COLUMN logprob_tokens INTEGER",
        ),
    ),
    (
        "0021_response_cache",
        (
            # Answers kept under the sha256 of the request they answered (endpoint,
            # model, messages, sampling: promptlab/engine/send/cache.py), never the request
            # itself and never a key; the output masked like a stored result's. A run
            # with `cache:` answers an identical request from here (store/response_cache.py).
            # One row per key, kept by the writer (a put deletes the key's row first), not
            # by an index: a run reads its entries by endpoint and model, never by key,
            # and a key index doubled the cost of keeping a run's answers.
            """
            CREATE TABLE response_cache (
                cache_key       VARCHAR NOT NULL,
                endpoint        VARCHAR NOT NULL,
                model           VARCHAR NOT NULL,
                output_text     VARCHAR NOT NULL,
                input_tokens    INTEGER,
                output_tokens   INTEGER,
                finish_reason   VARCHAR,
                model_version   VARCHAR,
                latency_ms      DOUBLE,
                token_entropy   DOUBLE,
                logprob_mean    DOUBLE,
                logprob_tokens  INTEGER,
                source_run_id   VARCHAR,
                created_at      TIMESTAMPTZ NOT NULL
            )
            """,
            # A result answered from it: not sent, cost 0, no latency (NULL on results
            # stored before, read as false).
            "ALTER TABLE results ADD COLUMN cache_hit BOOLEAN",
        ),
    ),
    (
        "0022_provider_batches",
        (
            # The provider-batch executor's ledger (providers/batches/): each chunk and
            # its lines (custom id, item key, attempt) written before its submit, its
            # batch id as soon as the provider gives it, so a resumed run polls what it
            # submitted and never submits a chunk twice. No key is in it.
            """
            CREATE TABLE provider_batches (
                chunk_id      VARCHAR PRIMARY KEY,
                run_id        VARCHAR NOT NULL,
                endpoint      VARCHAR NOT NULL,
                kind          VARCHAR NOT NULL,
                batch_id      VARCHAR,
                state         VARCHAR NOT NULL,
                lines         VARCHAR NOT NULL,
                line_count    INTEGER NOT NULL,
                succeeded     INTEGER NOT NULL DEFAULT 0,
                failed        INTEGER NOT NULL DEFAULT 0,
                message       VARCHAR,
                collected     BOOLEAN NOT NULL DEFAULT false,
                created_at    TIMESTAMPTZ NOT NULL,
                submitted_at  TIMESTAMPTZ,
                expires_at    TIMESTAMPTZ,
                updated_at    TIMESTAMPTZ NOT NULL
            )
            """,
            "CREATE INDEX provider_batches_run ON provider_batches (run_id)",
        ),
    ),
    (
        "0023_idempotency_keys",
        (
            # A server's answers by idempotency key (promptlab/server/answers.py): a
            # client that retries after the server restarted gets the first answer, and
            # nothing runs twice. The body is kept as its SHA-256 only.
            """
            CREATE TABLE idempotency_keys (
                caller      VARCHAR NOT NULL,
                route       VARCHAR NOT NULL,
                key         VARCHAR NOT NULL,
                body_sha256 VARCHAR NOT NULL,
                answer      VARCHAR NOT NULL,
                created_at  TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (caller, route, key)
            )
            """,
        ),
    ),
    (
        "0024_live_gateway",
        (
            # A live call through the gateway (promptlab/gateway/) is a production log
            # row like an imported one, with what the gateway saw: its trace (unique, so
            # folding the call journal again after a crash adds nothing twice), the
            # experiment and variant that chose the version, and the answer's figures.
            "ALTER TABLE production_logs ADD COLUMN trace VARCHAR",
            "ALTER TABLE production_logs ADD COLUMN experiment VARCHAR",
            "ALTER TABLE production_logs ADD COLUMN variant VARCHAR",
            "ALTER TABLE production_logs ADD COLUMN model VARCHAR",
            "ALTER TABLE production_logs ADD COLUMN ttft_ms DOUBLE",
            "ALTER TABLE production_logs ADD COLUMN input_tokens BIGINT",
            "ALTER TABLE production_logs ADD COLUMN output_tokens BIGINT",
            "ALTER TABLE production_logs ADD COLUMN cost_usd DOUBLE",
            "ALTER TABLE production_logs ADD COLUMN finish_reason VARCHAR",
            "ALTER TABLE production_logs ADD COLUMN check_status VARCHAR",
            "ALTER TABLE production_logs ADD COLUMN http_status INTEGER",
            "CREATE UNIQUE INDEX production_logs_trace ON production_logs (trace)",
            # A feedback event sent live (POST /v1/feedback/events) carries its own id
            # (unique: a retried send adds nothing), the trace of the call it is about,
            # and for a named score its name.
            "ALTER TABLE feedback ADD COLUMN event_id VARCHAR",
            "ALTER TABLE feedback ADD COLUMN trace VARCHAR",
            "ALTER TABLE feedback ADD COLUMN score_name VARCHAR",
            "CREATE UNIQUE INDEX feedback_event_id ON feedback (event_id)",
        ),
    ),
    (
        "0025_rollouts",
        (
            # A guarded rollout's state (promptlab/facades/rollouts.py): one row per
            # experiment whose revision carries `rollout:`, moved by its decisions.
            """
            CREATE TABLE rollouts (
                experiment       VARCHAR PRIMARY KEY,
                state            VARCHAR NOT NULL,
                started_at       TIMESTAMPTZ NOT NULL,
                stage_started_at TIMESTAMPTZ NOT NULL,
                decided_at       TIMESTAMPTZ,
                last_action      VARCHAR,
                reason           VARCHAR
            )
            """,
            # Each check's guardrails, kept for the tiles' lines over time (the last
            # MAX_LOOKS checks of a rollout).
            """
            CREATE TABLE rollout_looks (
                experiment VARCHAR NOT NULL,
                looked_at  TIMESTAMPTZ NOT NULL,
                metric     VARCHAR NOT NULL,
                effect     DOUBLE NOT NULL,
                low        DOUBLE NOT NULL,
                high       DOUBLE NOT NULL
            )
            """,
            # A live call's attempts and the failed ones among them (retried or not):
            # a rollout's error-rate guardrail counts attempts, not calls.
            "ALTER TABLE production_logs ADD COLUMN attempts INTEGER",
            "ALTER TABLE production_logs ADD COLUMN failed_attempts INTEGER",
        ),
    ),
    (
        "0026_log_decisions",
        (
            # The final look at two versions in production logs, taken once
            # (promptlab/store/decisions.py): the pair is the key.
            """
            CREATE TABLE log_decisions (
                version_a     VARCHAR NOT NULL,
                version_b     VARCHAR NOT NULL,
                label_a       VARCHAR NOT NULL,
                label_b       VARCHAR NOT NULL,
                decided_at    TIMESTAMPTZ NOT NULL,
                decided_by    VARCHAR NOT NULL,
                planned_units INTEGER NOT NULL,
                since         TIMESTAMPTZ,
                method        VARCHAR NOT NULL,
                units_a       BIGINT NOT NULL,
                units_b       BIGINT NOT NULL,
                family_size   INTEGER NOT NULL,
                rows          VARCHAR NOT NULL,
                PRIMARY KEY (version_a, version_b)
            )
            """,
        ),
    ),
    (
        "0027_version_sources",
        (
            # The git commit a version was first added from (promptlab/prompts/
            # gitsource.py), as the client that added it read it; `dirty` when the file
            # differed from that commit. A version added from no work tree has no row.
            """
            CREATE TABLE version_sources (
                prompt_name VARCHAR NOT NULL,
                version_id  VARCHAR NOT NULL,
                git_commit  VARCHAR NOT NULL,
                git_dirty   BOOLEAN NOT NULL,
                git_path    VARCHAR NOT NULL,
                recorded_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (prompt_name, version_id)
            )
            """,
        ),
    ),
    (
        "0028_item_drift",
        (
            # Semantic drift per rendering (a run's variant and dataset row), from the
            # run's last drift check (promptlab/evaluation/drift.py): the cosine distance
            # of the rendered prompt's embedding from its version's anchor.
            """
            CREATE TABLE item_drift (
                run_id        VARCHAR NOT NULL,
                variant_index INTEGER NOT NULL,
                row_index     BIGINT NOT NULL,
                distance      DOUBLE NOT NULL,
                drifted       BOOLEAN NOT NULL,
                threshold     DOUBLE NOT NULL,
                embedder      VARCHAR NOT NULL,
                checked_at    TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (run_id, variant_index, row_index)
            )
            """,
        ),
    ),
    (
        "0029_crosscheck_rounds",
        (
            # A cross-checked row measured for its tiebreak before the run ended
            # (promptlab/evaluation/tiebreak.py): its models' agreement weighing alike,
            # the largest cosine distance between their reasoning's embeddings, and
            # whether the tiebreak model was sent it.
            """
            CREATE TABLE crosscheck_rounds (
                run_id      VARCHAR NOT NULL,
                row_index   BIGINT NOT NULL,
                agreement   DOUBLE NOT NULL,
                divergence  DOUBLE,
                reinferred  BOOLEAN NOT NULL,
                embedder    VARCHAR NOT NULL,
                measured_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (run_id, row_index)
            )
            """,
        ),
    ),
)
