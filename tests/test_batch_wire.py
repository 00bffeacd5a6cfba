"""What keeps `promptlab batch` near the wire, checked without a clock.

bench/wire.py has the wall-clock figures (a plain aiohttp client beside it). These pin
what made them: no pyarrow (which imports pandas) on a run's way, a new database's
migrations in one transaction, rows written as NumPy columns exactly as before, and the
answer log's segments deleted at once but closed off the engine loop.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest

from promptlab.engine.answerlog import LOG_SUFFIX, AnswerLog
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.records import AttemptRow, FinalRow, VariantRecord, WriteBatch
from promptlab.store import ItemStore, RunStore, Store
from promptlab.store.migrations import MIGRATIONS, Migration, apply_migrations

ROOT = Path(__file__).resolve().parent.parent
#: What a batch over a --base-url endpoint needs none of.
NOT_NEEDED = {"pyarrow", "pandas", "plotly", "streamlit", "openai", "anthropic", "scipy"}


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with serve_in_thread(FakeLLMConfig(port=0)) as running:
        yield running


def test_a_batch_run_imports_neither_pyarrow_nor_pandas(
    server: RunningServer, tmp_path: Path
) -> None:
    requests = tmp_path / "requests.jsonl"
    lines = [
        {"custom_id": f"r{i}", "body": {"model": "gpt-4o-mini", "max_tokens": 8,
                                        "messages": [{"role": "user", "content": f"hi {i}"}]}}
        for i in range(3)
    ]  # fmt: skip
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    output = tmp_path / "out.jsonl"
    args = ["--db", str(tmp_path / "b.duckdb"), "batch", str(requests), "--base-url",
            server.openai_base_url, "--quiet", "-o", str(output)]  # fmt: skip
    script = textwrap.dedent(
        f"""
        import json, sys
        from promptlab.cli import main
        try:
            main.main({args!r}, standalone_mode=False)
        except SystemExit as exc:
            assert not exc.code, exc.code
        print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert not loaded & NOT_NEEDED, f"promptlab batch imported {loaded & NOT_NEEDED}"
    answered = [json.loads(line) for line in output.read_text().splitlines()]
    assert [a["custom_id"] for a in answered] == ["r0", "r1", "r2"]
    assert all(a["response"]["status_code"] == 200 for a in answered)


def test_a_new_database_takes_its_migrations_in_one_transaction(tmp_path: Path) -> None:
    good = Migration("0001_good", ("CREATE TABLE good (x INTEGER)",))
    more = Migration("0002_more", ("CREATE TABLE more (x INTEGER)",))
    broken = Migration("0003_broken", ("NOT SQL",))
    fresh = duckdb.connect(str(tmp_path / "fresh.duckdb"))
    with pytest.raises(duckdb.Error):
        apply_migrations(fresh, (good, more, broken))
    assert fresh.execute("SELECT count(*) FROM _migrations").fetchone() == (0,)
    # An existing database moves a migration at a time: those before the broken one stay.
    existing = duckdb.connect(str(tmp_path / "existing.duckdb"))
    assert apply_migrations(existing, (good,)) == ["0001_good"]
    with pytest.raises(duckdb.Error):
        apply_migrations(existing, (good, more, broken))
    names = existing.execute("SELECT name FROM _migrations ORDER BY name").fetchall()
    assert names == [("0001_good",), ("0002_more",)]


def test_every_migration_applies_to_a_new_database_at_once(tmp_path: Path) -> None:
    conn = duckdb.connect(str(tmp_path / "all.duckdb"))
    assert apply_migrations(conn) == [m.name for m in MIGRATIONS]
    assert apply_migrations(conn) == []


def test_rows_keep_their_nulls_and_exact_times_whatever_the_session_zone(
    tmp_path: Path,
) -> None:
    aware = datetime(2026, 3, 8, 6, 59, 59, 999_999, tzinfo=UTC)
    offset = datetime(2026, 3, 8, 2, 30, 0, 123, tzinfo=timezone(timedelta(hours=-5)))
    naive = datetime(2026, 3, 8, 2, 30, 0, 7)  # taken as UTC
    attempts = [
        AttemptRow("k1", "r1", 1, aware, offset, "ok", None, 200, None, 1.5, None, None, 12.25),
        AttemptRow("k2", "r1", 2, naive, aware, "error", "rate_limit", None, "slow", 0.0,
                   "throttle", 2.5, None, reask=True),
    ]  # fmt: skip
    finals = [
        FinalRow("k1", "r1", 0, 0, "v", 0, "succeeded", "p@1", "e", "m", {"a": 1}, 1, offset,
                 output_text="hi", input_tokens=5, latency_ms=3.0, check_status="no_schema",
                 logprob_tokens=7),
        FinalRow("k2", "r1", 1, 1, "v", 0, "failed", "p@1", "e", "m", {}, 2, naive,
                 error_kind="server", error_message="boom", rule_status="failed",
                 rule_errors=("a", "b"), cache_hit=True),
    ]  # fmt: skip
    with Store(tmp_path / "rows.duckdb") as store:
        variant = VariantRecord(0, "v", "p@1", "sha256:p", "e", "m", {}, {})
        RunStore(store).create_run("r1", "rows", {}, [variant])
        with store.transaction() as tx:
            tx.execute("SET GLOBAL TimeZone = 'America/New_York'")  # the writer's cursor too
            tx.execute(
                "INSERT INTO items VALUES ('k1', 'r1', 0, 0, 0, 0, 'pending', NULL, 0, now()), "
                "('k2', 'r1', 1, 1, 0, 0, 'pending', NULL, 0, now())"
            )
        ItemStore(store).write_batch(WriteBatch(attempts=attempts, finals=finals))
        with store.read() as cur:
            cur.execute("SET TimeZone = 'UTC'")
            stored_attempts = cur.execute(
                "SELECT idempotency_key, epoch_us(started_at), epoch_us(ended_at), http_status, "
                "error_kind, retry_after_s, latency_ms, reask FROM attempts ORDER BY 1"
            ).fetchall()
            stored_finals = cur.execute(
                "SELECT idempotency_key, epoch_us(finished_at), input_tokens, output_tokens, "
                "latency_ms, cost_usd, params, rule_errors, logprob_tokens, cache_hit "
                "FROM results ORDER BY 1"
            ).fetchall()
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    us = {t: (t.replace(tzinfo=t.tzinfo or UTC) - epoch) // timedelta(microseconds=1)
          for t in (aware, offset, naive)}  # fmt: skip
    assert stored_attempts == [
        ("k1", us[aware], us[offset], 200, None, None, 12.25, False),
        ("k2", us[naive], us[aware], None, "rate_limit", 2.5, None, True),
    ]
    assert stored_finals == [
        ("k1", us[offset], 5, None, 3.0, None, '{"a": 1}', None, 7, False),
        ("k2", us[naive], None, None, None, None, "{}", '["a", "b"]', None, True),
    ]


def test_dropped_segments_are_gone_at_once_and_closed_by_close(tmp_path: Path) -> None:
    log = AnswerLog(tmp_path)
    row = AttemptRow("k", "r", 1, datetime.now(UTC), datetime.now(UTC), "ok", None, 200, None,
                     0.0, None, None, 1.0)  # fmt: skip
    log.attempt(row)
    sealed = log.seal()
    log.drop(sealed)
    assert not list(tmp_path.glob(f"*{LOG_SUFFIX}"))  # nothing left to fold
    log.close(keep=False)
    assert all(segment.closed for segment in sealed)
