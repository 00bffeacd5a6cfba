"""`audit verify` vouches for the stored rows too: every results and attempts row is
checked against the hash (or copy) its event recorded, and every chain against the
anchor written with it. Real runs on the simulated model, tampered with plain SQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner, Result
from streamlit.testing.v1 import AppTest

from promptlab.audit.checks import result_event_orphaned
from promptlab.audit.report import ChainProblem
from promptlab.cli import main
from promptlab.config import Settings
from promptlab.engine import Engine, parse_spec
from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.base import CompletionRequest, CompletionResponse
from promptlab.providers.config import EndpointConfig
from promptlab.providers.sim import SimProvider
from promptlab.store import Store
from promptlab.store.audit import AuditLog
from tests.apptest_helpers import shown

ROWS = 8
#: A seed whose first draws give some items a failed first attempt (checked below).
SEED = 3
PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "audit.py")

pytestmark = pytest.mark.timeout(60)


class KeyRevoked(SimProvider):
    """The simulated model, refusing the key while `revoked` (an error that stops the
    run: its failed items go back to pending when it is resumed)."""

    revoked = True

    async def complete(self, request: CompletionRequest) -> CompletionResponse:
        if self.revoked:
            raise ProviderError(ErrorKind.AUTH, "key revoked", status=401, provider=self.name)
        return await super().complete(request)


def spec_of(tmp_path: Path, rows: int = ROWS) -> dict[str, Any]:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(rows)))
    return {
        "name": "verified",
        "dataset": str(dataset),
        "variants": [
            {
                "name": "only",
                "messages": [{"role": "user", "content": "Say: {{ text }}"}],
                "model": "quick:fast",
                "params": {"max_tokens": 16},
            }
        ],
        "retry": {"max_attempts": 8, "backoff_base_s": 0.001, "backoff_cap_s": 0.002},
    }


def sim_run(tmp_path: Path, store: Store, *, error_rate: float = 0.4) -> str:
    """A completed run of ROWS items on the simulated model; with `error_rate`, some
    attempts fail with a 500 first (their own events) and are retried."""
    spec = spec_of(tmp_path)
    endpoint = EndpointConfig(name="quick", kind="sim", latency_scale=0)
    provider = SimProvider(endpoint, latency_scale=0, seed=SEED, server_error_rate=error_rate)
    with Engine(store, endpoints={"quick": endpoint}, provider_factory=lambda _c: provider) as e:
        run_id = e.submit(parse_spec(spec))
        assert e.wait(run_id, timeout=30).status == "completed"
    return run_id


@pytest.fixture
def run_db(tmp_path: Path, db_path: Path) -> Iterator[tuple[Path, str]]:
    """A database holding one completed, retried run (closed: tests tamper with it)."""
    with Store(db_path) as store:
        run_id = sim_run(tmp_path, store)
        report = AuditLog(store).verify()
        assert report.ok, report.problems
    yield db_path, run_id


def sql(db: Path, statement: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db))
    try:
        return con.execute(statement, params or []).fetchall()
    finally:
        con.close()


def verify(db: Path) -> Result:
    return CliRunner().invoke(main, ["--db", str(db), "audit", "verify"])


def failing(db: Path) -> str:
    result = verify(db)
    assert result.exit_code == 1, result.output
    return result.output


def one_key(db: Path, run_id: str, attempts: int = 1) -> str:
    """An item of the run that succeeded after `attempts` attempts."""
    rows = sql(
        db,
        "SELECT idempotency_key FROM results WHERE run_id = ? AND status = 'succeeded' "
        "AND attempts = ? ORDER BY seq LIMIT 1",
        [run_id, attempts],
    )
    assert rows, f"no item succeeded after {attempts} attempt(s)"
    return str(rows[0][0])


def test_an_untouched_run_verifies_with_its_rows_counted(run_db: tuple[Path, str]) -> None:
    db, _ = run_db
    (failed_attempts,) = sql(db, "SELECT count(*) FROM attempts WHERE outcome = 'error'")[0]
    assert failed_attempts > 0  # the seed gives retries: attempt events are checked too
    result = verify(db)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: ")
    assert f"{ROWS} results and {ROWS + failed_attempts} attempts rows match" in result.output


#: A copy of an item's results row under another key (g... is never a hex key), with its own output.
FORGED_ROW = (
    "INSERT INTO results SELECT 'g' || idempotency_key[2:], run_id, seq + 1000, row_index, "
    "variant, repeat, status, error_kind, error_message, prompt_version_id, endpoint, "
    "model, params, 'made up', input_tokens, output_tokens, finish_reason, model_version, "
    "latency_ms, cost_usd, attempts, finished_at, check_status, check_errors, rule_status, "
    "rule_errors, token_entropy, shard_id, logprob_mean, logprob_tokens, cache_hit FROM results "
    "WHERE idempotency_key = ?"
)


@pytest.mark.parametrize(
    ("attempts", "tamper", "expected"),
    [
        (
            1,
            "UPDATE results SET output_text = 'forged' WHERE idempotency_key = ?",
            ["run {run}: results row of item {key} modified", "result_sha256"],
        ),
        (
            1,
            "UPDATE results SET status = 'failed' WHERE idempotency_key = ?",
            ["results row of item {key} modified: status differs"],
        ),
        (
            1,
            "DELETE FROM results WHERE idempotency_key = ?",
            ["run {run}: results row of item {key} deleted"],
        ),
        (1, FORGED_ROW, ["run {run}: results row of item g{tail} inserted"]),
        (
            1,
            "DELETE FROM attempts WHERE idempotency_key = ?",
            ["run {run}: attempts row of item {key} attempt 1 deleted"],
        ),
        (
            1,
            "UPDATE attempts SET latency_ms = 1.5 WHERE idempotency_key = ?",
            ["attempts row of item {key} attempt 1 modified", "attempt_sha256"],
        ),
        (
            2,
            "UPDATE attempts SET http_status = 429 WHERE idempotency_key = ? AND attempt = 1",
            ["attempts row of item {key} attempt 1 modified: http_status"],
        ),
        (
            2,
            "DELETE FROM attempts WHERE idempotency_key = ? AND attempt = 1",
            ["attempts row of item {key} attempt 1 deleted"],
        ),
    ],
    ids=[
        "results-edited",
        "results-status",
        "results-deleted",
        "results-inserted",
        "answer-deleted",
        "answer-edited",
        "failed-attempt-edited",
        "failed-attempt-deleted",
    ],
)
def test_a_tampered_row_fails_naming_the_run_item_and_what(
    run_db: tuple[Path, str], attempts: int, tamper: str, expected: list[str]
) -> None:
    """A row of an item that succeeded after `attempts` attempts, changed with SQL."""
    db, run_id = run_db
    key = one_key(db, run_id, attempts)
    sql(db, tamper, [key])
    out = failing(db)
    for text in expected:
        assert text.format(run=run_id, key=key, tail=key[1:]) in out


def test_a_tail_cut_with_its_run_ended_event_fails(tmp_path: Path, db_path: Path) -> None:
    """The thorough forger: the run's last events, the rows they covered and the
    `run.ended` checkpoint all go. The chain's anchor still names its head."""
    with Store(db_path) as store:
        run_id = sim_run(tmp_path, store, error_rate=0)  # one event per item
    chain = f"run:{run_id}"
    (head,) = sql(db_path, "SELECT max(seq) FROM audit_events WHERE chain = ?", [chain])[0]
    keys = "SELECT trace_id FROM audit_events WHERE chain = ? AND seq > ?"
    for table in ("results", "attempts", "items"):
        sql(db_path, f"DELETE FROM {table} WHERE idempotency_key IN ({keys})", [chain, head - 2])
    sql(db_path, "DELETE FROM audit_events WHERE chain = ? AND seq > ?", [chain, head - 2])
    sql(db_path, "DELETE FROM audit_events WHERE kind = 'run.ended' AND run_id = ?", [run_id])
    out = failing(db_path)
    assert f"chain {chain} tail cut" in out and f"its head at seq {head}" in out
    assert "chain changes tail cut" in out  # run.ended was the newest change event


def test_an_emptied_audit_log_fails_naming_each_chain(run_db: tuple[Path, str]) -> None:
    db, run_id = run_db
    sql(db, "DELETE FROM audit_events")
    out = failing(db)
    assert f"chain run:{run_id} missing chain" in out
    assert "chain changes missing chain" in out


def test_a_run_with_results_but_no_chain_and_no_anchor_fails(run_db: tuple[Path, str]) -> None:
    """Its run.submitted event says it was audited: results without a chain are not."""
    db, run_id = run_db
    sql(db, f"DELETE FROM audit_events WHERE chain = 'run:{run_id}'")
    sql(db, f"DELETE FROM audit_anchors WHERE chain = 'run:{run_id}'")
    out = failing(db)
    assert f"chain run:{run_id} missing chain" in out and f"{ROWS} results rows" in out


def test_a_deleted_anchor_fails(run_db: tuple[Path, str]) -> None:
    db, run_id = run_db
    sql(db, f"DELETE FROM audit_anchors WHERE chain = 'run:{run_id}'")
    out = failing(db)
    assert f"chain run:{run_id} not anchored" in out


def test_a_database_from_before_anchors_is_anchored_when_it_migrates(
    run_db: tuple[Path, str],
) -> None:
    """Migration 0010 pins every chain as it stands: an old database verifies, and a
    tail cut after the upgrade is caught."""
    db, run_id = run_db
    sql(db, "DROP TABLE audit_anchors")
    sql(db, "DELETE FROM _migrations WHERE name = '0010_audit_anchors'")
    result = verify(db)
    assert result.exit_code == 0, result.output
    ((anchored,),) = sql(db, "SELECT count(*) FROM audit_anchors")
    assert anchored == 2
    chain = f"run:{run_id}"
    (head,) = sql(db, "SELECT max(seq) FROM audit_events WHERE chain = ?", [chain])[0]
    sql(db, "DELETE FROM audit_events WHERE chain = ? AND seq = ?", [chain, head])
    sql(db, "DELETE FROM audit_events WHERE kind = 'run.ended'")
    assert f"chain {chain} tail cut" in failing(db)


def test_a_run_made_with_the_audit_off_is_noted_not_failed(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_AUDIT", "0")
    with Store(db_path) as store:
        sim_run(tmp_path, store, error_rate=0)
    monkeypatch.delenv("PROMPTLAB_AUDIT")
    result = verify(db_path)
    assert result.exit_code == 0, result.output
    assert "note: 1 run(s) made with the audit off: their rows are not checked" in result.output


def test_a_cancelled_run_verifies(tmp_path: Path, db_path: Path) -> None:
    """Items closed by a cancel get a `cancelled` row without an event: no false alarm
    (a run cancelled before it sent anything has no chain at all), and such a row must
    not hold an answer."""
    spec = {**spec_of(tmp_path, rows=200), "limits": {"quick": {"concurrency": 2}}}
    endpoint = EndpointConfig(name="quick", kind="sim", latency_scale=0.02)
    with Store(db_path) as store:
        with Engine(store, endpoints={"quick": endpoint}) as engine:
            run_id = engine.submit(parse_spec(spec))
            deadline = time.monotonic() + 30
            while engine.status(run_id).succeeded < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            engine.cancel(run_id)
            assert engine.wait(run_id, timeout=30).status == "cancelled"
        report = AuditLog(store).verify()
        assert report.ok, report.problems
        with store.read() as cur:
            (bulk,) = cur.execute(
                "SELECT count(*) FROM results r WHERE run_id = ? AND NOT EXISTS (SELECT 1 "
                "FROM audit_events e WHERE e.trace_id = r.idempotency_key AND kind = 'result')",
                [run_id],
            ).fetchall()[0]
    assert bulk > 0, "every item was answered before the cancel landed"
    sql(
        db_path,
        "UPDATE results SET output_text = 'slipped in' WHERE idempotency_key = (SELECT "
        "min(idempotency_key) FROM results r WHERE NOT EXISTS (SELECT 1 FROM audit_events e "
        "WHERE e.trace_id = r.idempotency_key AND kind = 'result'))",
    )
    assert "holds an answer" in failing(db_path)


def test_rows_are_checked_page_by_page(
    run_db: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import promptlab.store.audit_rows as audit_rows

    db, run_id = run_db
    monkeypatch.setattr(audit_rows, "ROW_PAGE", 3)
    keys = [
        str(r[0])
        for r in sql(
            db, "SELECT idempotency_key FROM results WHERE run_id = ? ORDER BY seq", [run_id]
        )
    ]
    sql(db, "UPDATE results SET output_text = 'x' WHERE idempotency_key = ?", [keys[-1]])
    with Store(db) as store:
        report = AuditLog(store).verify()
    (run,) = report.runs
    assert (run.results, run.mismatched) == (ROWS - 1, 1)
    assert keys[-1] in str(run.mismatches[0])


def test_the_audit_page_names_a_row_that_differs(run_db: tuple[Path, str]) -> None:
    db, run_id = run_db
    key = one_key(db, run_id)
    sql(db, "UPDATE results SET output_text = 'forged' WHERE idempotency_key = ?", [key])
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception
    (error,) = at.error
    assert f"run {run_id}: results row of item {key} modified" in shown(error.value)
    assert "1 stored row of 1 run differs from its events" in shown(error.value)


def test_the_workbench_report_says_the_same(run_db: tuple[Path, str]) -> None:
    from promptlab.workbench import Workbench

    db, run_id = run_db
    key = one_key(db, run_id)
    sql(db, "DELETE FROM attempts WHERE idempotency_key = ?", [key])
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        report = wb.audit.verify()
    assert not report.ok
    (problem,) = report.problems
    assert (problem.run_id, problem.key, problem.what) == (run_id, key, "deleted")


def test_a_run_cancelled_before_it_sent_anything_verifies(tmp_path: Path, db_path: Path) -> None:
    """Every row a cancel's, none with an event, and so no chain: nothing to report."""
    endpoint = EndpointConfig(name="quick", kind="sim", latency_scale=0)
    with Store(db_path) as store:
        with Engine(store, endpoints={"quick": endpoint}) as engine:
            run_id = engine.submit(parse_spec(spec_of(tmp_path, rows=20)))
            engine.cancel(run_id)
            progress = engine.wait(run_id, timeout=30)
        report = AuditLog(store).verify()
    # Cancelled at once, the run may stop before its plan is stored: whatever was
    # planned is cancelled, and nothing was sent.
    assert progress.cancelled == progress.total, "an item was sent before the cancel landed"
    assert progress.succeeded == progress.failed == 0
    assert report.ok, report.problems
    assert all(c.chain != f"run:{run_id}" for c in report.chains)


def test_a_run_stopped_and_resumed_verifies(tmp_path: Path, db_path: Path) -> None:
    """A resume deletes the failed and cancelled rows it reopens; their result events
    stay, recording rows a later one replaced: no false alarm."""
    endpoint = EndpointConfig(name="quick", kind="sim", latency_scale=0)
    provider = KeyRevoked(endpoint, latency_scale=0)
    with Store(db_path) as store:
        with Engine(
            store, endpoints={"quick": endpoint}, provider_factory=lambda _c: provider
        ) as e:
            run_id = e.submit(parse_spec(spec_of(tmp_path)))
            assert e.wait(run_id, timeout=30).status == "failed"
            provider.revoked = False
            e.resume(run_id)
            assert e.wait(run_id, timeout=30).status == "completed"
        report = AuditLog(store).verify()
        with store.read() as cur:
            (replaced,) = cur.execute(
                "SELECT count(*) FROM audit_events WHERE chain = ? AND kind = 'result' "
                "AND json_extract_string(payload, '$.status') <> 'succeeded'",
                [f"run:{run_id}"],
            ).fetchall()[0]
    assert replaced > 0  # result events whose rows the resume deleted
    assert report.ok, report.problems
    (run,) = report.runs
    assert run.results == ROWS


@pytest.mark.parametrize(
    ("status", "now_status", "now_later", "item", "explained"),
    [
        ("failed", None, None, "pending", True),  # reopened, not final yet
        ("failed", None, None, "failed", False),  # row deleted, item left final
        ("succeeded", None, None, "pending", False),  # a resume never reopens a success
        ("cancelled", "succeeded", True, "succeeded", True),  # reopened, answered later
        ("succeeded", "failed", True, "failed", False),
        ("succeeded", "cancelled", False, "cancelled", True),  # answered after a cancel
        ("succeeded", "failed", False, "failed", False),
    ],
)
def test_a_result_event_without_its_row_is_explained_or_named(
    status: str, now_status: str | None, now_later: bool | None, item: str, explained: bool
) -> None:
    from datetime import UTC, datetime, timedelta

    at = datetime(2026, 1, 1, tzinfo=UTC)
    now_at = None if now_later is None else at + timedelta(seconds=1 if now_later else -1)
    why = result_event_orphaned(status, at, now_status, now_at, item)
    assert (why is None) == explained, why


def test_an_event_moved_far_ahead_is_named_without_walking_the_gap(
    run_db: tuple[Path, str],
) -> None:
    """The chain is read in windows of seqs: a gap of a trillion is one lookup."""
    db, run_id = run_db
    chain = f"run:{run_id}"
    sql(db, "UPDATE audit_events SET seq = 1000000000000 WHERE chain = ? AND seq = 2", [chain])
    out = failing(db)
    assert f"chain {chain}: event seq 3" in out and "deleted: seq 2 missing" in out


def test_a_run_that_ended_twice_without_a_resume_fails_verify(
    tmp_path: Path, db_path: Path
) -> None:
    """One `run.ended` per start: a second end with no `run.resumed` since the first (a
    cancel and a resume both recorded, as a race once left them) is reported."""
    with Store(db_path) as store:
        run_id = sim_run(tmp_path, store, error_rate=0.0)
        assert AuditLog(store).verify().ok
        AuditLog(store).record_run_end(run_id, "someone", {"status": "cancelled"})
        report = AuditLog(store).verify()
    assert not report.ok
    assert [p.what for p in report.problems if isinstance(p, ChainProblem)] == ["ended twice"]
    assert f"run {run_id} ended cancelled after it had ended completed" in str(report.problems[0])
