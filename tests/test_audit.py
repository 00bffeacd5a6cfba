"""The audit trail end to end: traces through fakellm, change events, tamper detection."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from click.testing import CliRunner

from promptlab.audit.chain import CHANGES_CHAIN, run_chain
from promptlab.cli import main
from promptlab.config import Settings
from promptlab.engine import parse_spec
from promptlab.errors import NotFoundError
from promptlab.facades.audit import AuditFilter
from promptlab.fakellm.server import RunningServer
from promptlab.prompts.templates import Template
from promptlab.views.audit import timeline_bars, trace_stages
from promptlab.workbench import Workbench
from tests.fakellm_fixtures import ServerFactory

STAGES = ("render", "preflight", "routing", "response", "validation")


def spec_for(
    tmp_path: Path,
    server: RunningServer,
    monkeypatch: pytest.MonkeyPatch,
    rows: int = 3,
    key_env: str | None = None,
) -> dict[str, Any]:
    """A spec over `rows` rows, its endpoint `fake` in a providers file (set in the env)."""
    endpoint: dict[str, Any] = {
        "kind": "openai",
        "base_url": server.openai_base_url,
        "concurrency": 4,
        "models": {"*": {"context_window": 4_000}},
    }
    if key_env is not None:
        endpoint["api_key_env"] = key_env
    providers = tmp_path / "providers.yaml"
    providers.write_text(yaml.safe_dump({"endpoints": {"fake": endpoint}}))
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    dataset = tmp_path / "rows.csv"
    dataset.write_text(
        "text\n" + "".join(f"row {i} mail bob{i}@example.com\n" for i in range(rows))
    )
    spec: dict[str, Any] = {
        "name": "audited",
        "dataset": str(dataset),
        "variants": [
            {
                "name": "only",
                "messages": [{"role": "user", "content": "Say: {{ text }}"}],
                "model": "fake:gpt-4o-mini",
                "params": {"max_tokens": 32},
            }
        ],
        "retry": {"backoff_base_s": 0.01, "backoff_cap_s": 0.02, "timeout_s": 5},
    }
    return spec


def run(wb: Workbench, spec: dict[str, Any]) -> str:
    run_id = wb.runs.start(parse_spec(spec))
    wb.runs.wait(run_id, timeout=60)
    return run_id


def traces(wb: Workbench, run_id: str) -> list[Any]:
    keys = {
        e.trace_id for e in wb.audit.events(AuditFilter(run_id=run_id, kind="result", limit=None))
    }
    return [wb.audit.trace(str(key)) for key in sorted(keys, key=str)]


def test_a_succeeded_item_has_every_stage_in_its_trace(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for(tmp_path, fakellm, monkeypatch)
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        found = traces(wb, run_id)
    assert len(found) == 3
    for trace in found:
        assert [e.kind for e in trace.events] == ["result"]  # the answered attempt folded in
        result = trace.result
        assert result is not None
        assert result.payload["status"] == "succeeded" and result.payload["result_sha256"]
        assert trace.result_verified is True  # the stored row matches the event's hash
        payload = trace.stages
        assert all(payload.get(stage) is not None for stage in STAGES), payload
        render = payload["render"]
        assert render["semver"] and len(render["prompt_hash"]) == 64
        assert len(render["variables_hash"]) == 64 and payload["version_id"]
        assert render["prompt_matches"] is True and render["variables_match"] is True
        assert payload["preflight"]["context_window"] == 4_000
        assert payload["preflight"]["prompt_tokens"] > 0
        assert payload["routing"] == {"endpoint": "fake", "model": "gpt-4o-mini", "variant": "only"}
        assert payload["response"]["model_version"] and payload["response"]["finish_reason"]
        assert payload["validation"]["check_status"] == "no_schema"
        assert trace.prompt[0]["content"].startswith("Say: row")
        assert trace.output
        (attempt,) = trace.attempts
        assert attempt["status"] == "ok" and attempt["attempt"] == 1
        assert attempt["started_at"] <= attempt["ended_at"]
        # The view's timeline and stages read the joined-in result, not only the event.
        assert timeline_bars(trace)[-1].detail == "result: succeeded after 1 attempt(s)"
        final = next(s for s in trace_stages(trace) if s.name == "final")
        assert final.fields["attempts"] == 1 and final.fields["stored result matches its hash"]


def test_a_retried_item_has_one_event_per_attempt_with_its_error_and_wait(
    tmp_path: Path, fakellm_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = fakellm_factory(fail_rate=0.5, seed=3)
    spec = spec_for(tmp_path, server, monkeypatch, rows=8)
    spec["retry"]["max_attempts"] = 20
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        found = traces(wb, run_id)
    retried = [t for t in found if len(t.attempts) > 1]
    assert retried, "fail_rate 0.5 over 8 items retried none"
    for trace in retried:
        first, *_, last = trace.attempts
        assert first["status"] == "error" and first["error_kind"] == "server"
        assert last["status"] == "ok"
        assert trace.attempts[1]["wait_reason"] == "backoff"
        assert trace.attempts[1]["wait_ms"] > 0
        assert [e.kind for e in trace.events] == ["attempt"] * (len(trace.attempts) - 1) + [
            "result"
        ]
        assert trace.result is not None and trace.stages["attempts"] == len(trace.attempts)
        assert all(trace.stages.get(stage) is not None for stage in STAGES)


def test_failed_items_trace_the_stages_they_reached(
    tmp_path: Path, fakellm_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = fakellm_factory(fail_rate=1.0)
    spec = spec_for(tmp_path, server, monkeypatch, rows=2)
    spec["retry"]["max_attempts"] = 2
    too_long = dict(spec, variants=[dict(spec["variants"][0], params={"max_tokens": 3_999})])
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        sent = traces(wb, run_id)
        unsent = traces(wb, run(wb, too_long))
        failed = wb.audit.events(AuditFilter(run_id=run_id, status="failed", error_kind="server"))
    for trace in sent:
        result = trace.result
        assert result is not None
        assert result.payload["status"] == "failed" and result.payload["error_kind"] == "server"
        assert [a["error_kind"] for a in trace.attempts] == ["server", "server"]
        assert trace.stages["render"] and trace.stages["preflight"]
        assert trace.stages["routing"] and "response" not in trace.stages
    assert len(failed) == 2 and {e.kind for e in failed} == {"result"}
    assert len(unsent) == 2
    for trace in unsent:  # refused at preflight: rendered, never sent
        assert trace.attempts == []
        stages = trace.stages
        assert stages["error_kind"] == "context_length" and "preflight" not in stages
        assert stages["render"]["prompt_hash"] and "response" not in stages
        assert stages["render"]["prompt_matches"] is True


def test_change_events_name_their_actor(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=1)
    template = Template.build([{"role": "user", "content": "Hi {{ name }}"}])
    with Workbench.open() as wb:
        wb.prompts.create("greet", template)
        wb.prompts.set_label("greet", "1.0.0", "prod")
        (tmp_path / "d.csv").write_text("name\nann\n")
        wb.datasets.import_file(tmp_path / "d.csv", "people")
        run_id = run(wb, spec)
        changes = wb.audit.events(AuditFilter(kind=None, limit=None))
    kinds = [e.kind for e in changes if e.chain == CHANGES_CHAIN]
    assert kinds[:3] == ["prompt_version.created", "label.moved", "dataset.imported"]
    assert "run.submitted" in kinds and kinds[-1] == "run.ended"
    assert all(e.actor == "tester" for e in changes if e.chain == CHANGES_CHAIN)
    submitted = next(e for e in changes if e.kind == "run.submitted")
    assert submitted.run_id == run_id and submitted.payload["chain"] == run_chain(run_id)


def test_imports_ratings_and_exports_are_change_events(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=2)
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        key = wb.runs.items(run_id, status="succeeded", limit=1).rows[0].key
        (tmp_path / "fb.csv").write_text(f"result_id,kind\n{key},impression\n")
        wb.analysis.import_feedback(tmp_path / "fb.csv")
        wb.analysis.rate_result(run_id, key, "thumbs_up")
        wb.exports.write_table("results", "csv", tmp_path / "r.csv", run_id=run_id)
        wb.exports.table_bytes("items", "jsonl", run_id=run_id)
        changes = [e for e in wb.audit.events(AuditFilter(limit=None)) if e.chain == CHANGES_CHAIN]
        assert wb.audit.verify().ok
    by_kind = {e.kind: e for e in changes}
    assert by_kind["feedback.imported"].payload == {"file": "fb.csv", "rows": 1}
    assert by_kind["feedback.rated"].run_id == run_id
    exported = [e.payload for e in changes if e.kind == "table.exported"]
    assert [(p["table"], p["to"], p["rows"]) for p in exported] == [
        ("results", "r.csv", 2),
        ("items", "download", 2),
    ]


def tamper(db: Path, sql: str) -> None:
    con = duckdb.connect(str(db))
    try:
        con.execute(sql)
    finally:
        con.close()


@pytest.fixture
def audited_db(
    tmp_path: Path, fakellm: RunningServer, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str]:
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=5)
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        assert wb.audit.verify().ok
    return db_path, run_id


def verify_cli(db: Path) -> Any:
    return CliRunner().invoke(main, ["--db", str(db), "audit", "verify"])


def test_verify_passes_on_an_untouched_database(audited_db: tuple[Path, str]) -> None:
    db, _ = audited_db
    result = verify_cli(db)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: ")


def test_verify_names_an_edited_payload(audited_db: tuple[Path, str]) -> None:
    db, run_id = audited_db
    tamper(
        db,
        "UPDATE audit_events SET payload = json_object('status', 'succeeded', 'output', 'forged') "
        f"WHERE chain = 'run:{run_id}' AND seq = 4",
    )
    result = verify_cli(db)
    assert result.exit_code == 1
    assert f"chain run:{run_id}: event seq 4" in result.output and "modified" in result.output


def test_verify_names_a_deleted_row(audited_db: tuple[Path, str]) -> None:
    db, run_id = audited_db
    tamper(db, f"DELETE FROM audit_events WHERE chain = 'run:{run_id}' AND seq = 3")
    result = verify_cli(db)
    assert result.exit_code == 1
    assert f"chain run:{run_id}: event seq 4" in result.output
    assert "deleted: seq 3 missing" in result.output


def test_verify_names_a_deleted_last_row_from_the_run_end_checkpoint(
    audited_db: tuple[Path, str],
) -> None:
    db, run_id = audited_db
    tamper(db, f"DELETE FROM audit_events WHERE chain = 'run:{run_id}' AND seq = 5")
    result = verify_cli(db)
    assert result.exit_code == 1
    assert f"chain run:{run_id}: event seq 5" in result.output and "deleted" in result.output


def test_verify_names_an_inserted_row(audited_db: tuple[Path, str]) -> None:
    db, run_id = audited_db
    tamper(
        db,
        "INSERT INTO audit_events SELECT chain, seq, 'forged-event', trace_id, run_id, kind, "
        f"actor, \"at\", payload, prev_hash, hash FROM audit_events WHERE chain = 'run:{run_id}' "
        "AND seq = 2",
    )
    result = verify_cli(db)
    assert result.exit_code == 1
    assert f"chain run:{run_id}: event seq 2 (forged-event) inserted" in result.output


def test_verify_names_a_change_event_edited(audited_db: tuple[Path, str]) -> None:
    db, _ = audited_db
    tamper(db, "UPDATE audit_events SET actor = 'someone-else' WHERE chain = 'changes' AND seq = 1")
    result = verify_cli(db)
    assert result.exit_code == 1
    assert "chain changes: event seq 1" in result.output and "modified" in result.output


def test_verify_tells_a_null_from_an_empty_text(audited_db: tuple[Path, str]) -> None:
    db, _ = audited_db
    tamper(db, "UPDATE audit_events SET trace_id = '' WHERE chain = 'changes' AND seq = 1")
    result = verify_cli(db)
    assert result.exit_code == 1
    assert "chain changes: event seq 1" in result.output and "modified" in result.output


def test_show_prints_the_timeline_and_export_writes_lines(
    audited_db: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = audited_db
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        key = str(wb.audit.events(AuditFilter(run_id=run_id, kind="result", limit=1))[0].trace_id)
    shown = CliRunner().invoke(main, ["--db", str(db), "audit", "show", key[:10]])
    assert shown.exit_code == 0, shown.output
    for word in ("attempt 1: ok", "result: succeeded", "render:", "preflight:", "prompt:"):
        assert word in shown.output
    out = tmp_path / "audit.jsonl"
    exported = CliRunner().invoke(
        main, ["--db", str(db), "audit", "export", "--run", run_id, "-o", str(out)]
    )
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 5 + 2  # 5 items answered at once (one event each), submitted, ended
    assert all(line["hash"] and line["prev_hash"] for line in lines)
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        exports = wb.audit.events(AuditFilter(kind="table.exported"))
        assert exports[0].payload["rows"] == 7
        assert wb.audit.verify().ok
    # An existing file is kept unless --force; an unknown run writes nothing.
    again = ["--db", str(db), "audit", "export", "--run", run_id, "-o", str(out)]
    refused = CliRunner().invoke(main, again)
    assert refused.exit_code != 0 and "exists" in refused.output
    assert CliRunner().invoke(main, [*again, "--force"]).exit_code == 0
    keep = tmp_path / "keep.txt"
    keep.write_text("mine")
    unknown = ["--db", str(db), "audit", "export", "--run", "run_nope", "-o", str(keep)]
    missing = CliRunner().invoke(main, [*unknown, "--force"])
    assert missing.exit_code != 0 and "run_nope" in missing.output
    assert keep.read_text() == "mine" and not list(tmp_path.glob(".*.tmp"))


def test_audit_off_records_nothing(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=2)
    monkeypatch.setenv("PROMPTLAB_AUDIT", "0")
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        assert wb.audit.events(AuditFilter(limit=None)) == []
        key = wb.runs.items(run_id, limit=1).rows[0].key
        with pytest.raises(NotFoundError, match="from a run made with the audit off"):
            wb.audit.trace(key)


def test_masking_masks_stored_outputs_and_prompts_and_records_it(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_MASK", "email")
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=2)
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        found = traces(wb, run_id)
        with wb.store.read() as cur:
            outputs = [r[0] for r in cur.execute("SELECT output_text FROM results").fetchall()]
    for trace in found:
        assert trace.result is not None
        assert "example.com" not in json.dumps(trace.result.payload)
        # The prompt is not stored; the trace view renders it again, masked as well.
        assert "[masked:email]" in trace.prompt[0]["content"]
        assert "example.com" not in json.dumps(trace.stages)
        # What the masking masked in the stored output is recorded in the event.
        masked = (trace.output or "").count("[masked:email]")
        assert trace.result.payload["masking"].get("email", 0) == masked
    assert all("example.com" not in (text or "") for text in outputs)


def test_an_unknown_mask_pattern_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPTLAB_MASK", "email,ssn")
    with pytest.raises(Exception, match="PROMPTLAB_MASK: unknown pattern 'ssn'"):
        Settings.from_env()


KEY = "sk-audit-0123456789abcdefSECRET"


def test_an_api_key_reaches_no_text_or_json_column(
    tmp_path: Path, fakellm_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = fakellm_factory(echo_auth_rate=0.5, seed=1)
    monkeypatch.setenv("AUDIT_TEST_KEY", KEY)
    spec = spec_for(tmp_path, server, monkeypatch, rows=6, key_env="AUDIT_TEST_KEY")
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        wb.audit.export(tmp_path / "out.jsonl", run_id=run_id)
        assert wb.audit.events(AuditFilter(run_id=run_id, error_kind="bad_request")), (
            "no key was echoed"
        )
        with wb.store.read() as cur:
            columns = cur.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'main' AND data_type IN ('VARCHAR', 'JSON')"
            ).fetchall()
            hits = [
                f"{table}.{column}"
                for table, column in columns
                if cur.execute(
                    f'SELECT count(*) FROM "{table}" WHERE contains("{column}"::VARCHAR, ?)',
                    ["0123456789abcdef"],
                ).fetchall()[0][0]
            ]
    assert ("audit_events", "payload") in columns
    assert hits == []
    assert "0123456789abcdef" not in (tmp_path / "out.jsonl").read_text()


def test_events_filter_by_run_kind_model_status_and_experiment(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=2)
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        assert wb.audit.events(AuditFilter(experiment="nope")) == []
        assert {e.run_id for e in wb.audit.events(AuditFilter(run_id=run_id))} == {run_id}
        assert len(wb.audit.events(AuditFilter(run_id=run_id, kind="result"))) == 2
        assert (
            len(
                wb.audit.events(AuditFilter(run_id=run_id, model="gpt-4o-mini", status="succeeded"))
            )
            == 2
        )
        assert wb.audit.events(AuditFilter(run_id=run_id, model="other")) == []
        assert wb.audit.events(AuditFilter(run_id=run_id, status="failed")) == []


def test_verify_walks_a_long_chain_page_by_page(tmp_path: Path) -> None:
    """Verify reads a chain in keyset pages (VERIFY_PAGE events each): problems past the
    first page and a duplicate seq on a page boundary are still found."""
    import uuid
    from datetime import UTC, datetime

    from promptlab.audit.chain import AuditDraft
    from promptlab.store import Store
    from promptlab.store.audit import VERIFY_PAGE, AuditLog, append_events

    db = tmp_path / "long.duckdb"
    n = 2 * VERIFY_PAGE + 500
    with Store(db) as store:
        drafts = [
            AuditDraft(
                chain="run:long",
                kind="result",
                event_id=uuid.uuid4().hex,
                at=datetime.now(UTC),
                payload={"i": i},
                run_id="long",
                trace_id=uuid.uuid4().hex,
            )
            for i in range(n)
        ]
        with store.transaction() as tx:
            append_events(tx, drafts)
        report = AuditLog(store).verify()
        assert report.ok and sum(c.events for c in report.chains) == n
    late = 2 * VERIFY_PAGE + 100
    tamper(db, f"UPDATE audit_events SET payload = '{{\"i\": 0}}' WHERE seq = {late}")
    with Store(db) as store:
        (problem,) = AuditLog(store).verify().problems
    assert (problem.seq, problem.what) == (late, "modified")
    tamper(db, f"UPDATE audit_events SET payload = '{{\"i\": {late - 1}}}' WHERE seq = {late}")
    tamper(db, f"INSERT INTO audit_events SELECT * FROM audit_events WHERE seq = {VERIFY_PAGE}")
    with Store(db) as store:
        report = AuditLog(store).verify()
    (problem,) = report.problems
    assert (problem.seq, problem.what) == (VERIFY_PAGE, "inserted")
    assert sum(c.events for c in report.chains) == n + 1


def test_the_event_hash_is_the_one_stored_databases_were_chained_with() -> None:
    """Pinned: databases written before keep verifying. The digest was computed by the
    first version of the chaining (text fields joined, payload text last)."""
    from datetime import UTC, datetime

    from promptlab.audit.chain import AuditDraft, chain_drafts

    draft = AuditDraft(
        chain="run:r1",
        kind="result",
        event_id="k/final/1",
        at=datetime(2026, 11, 30, 6, 0, 0, 123456, tzinfo=UTC),
        payload={"status": "succeeded", "output": "caf\u00e9"},
        run_id="r1",
        trace_id="k",
    )
    chained = chain_drafts([draft], {"run:r1": (4, "ab" * 32)})
    assert chained.seq == [5] and chained.prev_hash == ["ab" * 32]
    assert chained.payload == ['{"status":"succeeded","output":"caf\u00e9"}']
    assert chained.hash == ["91143a70fb4bdf622b57304e37403ebebb194d371beebd50a9ad3eb5fc36ab48"]


def test_a_key_in_a_payload_is_masked_before_it_is_hashed() -> None:
    from datetime import UTC, datetime

    from promptlab.audit.chain import AuditDraft, AuditEvent, chain_drafts, hash_of
    from promptlab.audit.redact import MASK, Redactor

    redactor = Redactor(["s3cr3t-value-0000"])
    drafts = [
        AuditDraft(
            chain="run:r",
            kind="result",
            event_id=f"k{i}",
            at=datetime.now(UTC),
            payload={"output": text},
            run_id="r",
            trace_id=f"k{i}",
        )
        for i, text in enumerate(["fine", "echo s3cr3t-value-0000", "Bearer abcdefghijkl"])
    ]
    chained = chain_drafts(drafts, {}, redactor, redactor.suspects)
    assert chained.payload[0] == '{"output":"fine"}'
    assert "s3cr3t" not in chained.payload[1] and MASK in chained.payload[1]
    assert "abcdefghijkl" not in chained.payload[2]
    for i, draft in enumerate(drafts):
        event = AuditEvent(
            draft.chain,
            chained.seq[i],
            draft.event_id,
            draft.trace_id,
            draft.run_id,
            draft.kind,
            draft.actor,
            draft.at,
            chained.payload[i],
            chained.prev_hash[i],
            chained.hash[i],
        )
        assert hash_of(event) == event.hash


def test_export_streams_page_by_page_and_misses_no_event(
    audited_db: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of 2 events over a run's 7: every event once, in chain order, and the same
    file as with one page."""
    import promptlab.store.audit as store_audit
    from promptlab.store.audit import AuditFilter

    db, run_id = audited_db
    out = tmp_path / "run.jsonl"
    items = AuditFilter(chain=run_chain(run_id), limit=None)
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        wb.audit.export(tmp_path / "whole.jsonl", where=items)
        monkeypatch.setattr(store_audit, "VERIFY_PAGE", 2)
        wb.audit.export(tmp_path / "paged.jsonl", where=items)
        assert wb.audit.export(out, run_id=run_id) == 7
    assert (tmp_path / "paged.jsonl").read_text() == (tmp_path / "whole.jsonl").read_text()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    keys = [(line["chain"], line["seq"]) for line in lines]
    assert keys == sorted(set(keys)) and len(keys) == 7
    assert {line["chain"] for line in lines} == {CHANGES_CHAIN, run_chain(run_id)}


def test_an_item_cancelled_before_it_was_sent_says_why_it_has_no_trace(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=300)
    with Workbench.open() as wb:
        fakellm.gate(0)  # every request held: the run is planned and sending when cancelled
        try:
            run_id = wb.runs.start(parse_spec(spec))
            deadline = time.monotonic() + 60
            while fakellm.stats()["held"] == 0:
                assert time.monotonic() < deadline, "nothing was sent"
                time.sleep(0.01)
            wb.runs.cancel(run_id)
        finally:
            fakellm.gate(None)
        wb.runs.wait(run_id, timeout=60)
        traced = {e.trace_id for e in wb.audit.events(AuditFilter(run_id=run_id, limit=None))}
        page = wb.runs.items(run_id, status="cancelled", limit=500)
        untraced = [r.key for r in page.rows if r.key not in traced]
        assert untraced, "every item was sent before the cancel landed"
        with pytest.raises(NotFoundError, match="cancelled before it was sent"):
            wb.audit.trace(untraced[0])
        with pytest.raises(NotFoundError, match="no audit trace whose id"):
            wb.audit.trace("ffffffffffff")


def test_an_edited_result_row_no_longer_matches_its_event(audited_db: tuple[Path, str]) -> None:
    """A result event holds the hash of its results row, not a copy: the trace view and
    `audit show` tell when the row was changed after it was written."""
    db, run_id = audited_db
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        key = str(wb.audit.events(AuditFilter(run_id=run_id, kind="result", limit=1))[0].trace_id)
        assert wb.audit.trace(key).result_verified is True
    tamper(db, f"UPDATE results SET output_text = 'edited' WHERE idempotency_key = '{key}'")
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        trace = wb.audit.trace(key)
        assert trace.result_verified is False and trace.output == "edited"
        assert not wb.audit.verify().ok  # verify checks the rows against their events too
    shown = CliRunner().invoke(main, ["--db", str(db), "audit", "show", key])
    assert "the stored result DOES NOT match the hash its event recorded" in shown.output


def test_a_key_in_the_dataset_is_redacted_in_the_prompt_a_trace_renders_again(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch, db_path: Path
) -> None:
    """The prompt is not stored but rendered again from the dataset row: it passes the
    same redaction as everything stored, in the view and in `audit show --json`."""
    monkeypatch.setenv("AUDIT_ROW_KEY", KEY)
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=1)
    Path(spec["dataset"]).write_text(f"text\nmy key {KEY} and Bearer abcdefghijkl\n")
    with Workbench.open() as wb:
        run_id = run(wb, spec)
        (trace,) = traces(wb, run_id)
    shown = json.dumps(trace.prompt)
    assert "0123456789abcdef" not in shown and "abcdefghijkl" not in shown
    assert "[redacted]" in shown and trace.stages["render"]["prompt_matches"] is True
    out = CliRunner().invoke(
        main, ["--db", str(db_path), "audit", "show", trace.trace_id, "--json"]
    )
    assert out.exit_code == 0 and "0123456789abcdef" not in out.output


def test_the_prompt_is_masked_as_the_run_masked_whatever_the_viewer_sets(
    tmp_path: Path, fakellm: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_MASK", "email")
    spec = spec_for(tmp_path, fakellm, monkeypatch, rows=1)
    with Workbench.open() as wb:
        run_id = run(wb, spec)
    monkeypatch.delenv("PROMPTLAB_MASK")
    with Workbench.open() as wb:
        (trace,) = traces(wb, run_id)
    assert trace.result is not None and trace.result.payload["masking"].keys() == {"email"}
    assert "example.com" not in json.dumps(trace.prompt)
    assert "[masked:email]" in trace.prompt[0]["content"]


def test_an_edited_answered_attempt_no_longer_matches_its_event(
    audited_db: tuple[Path, str],
) -> None:
    db, run_id = audited_db
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        key = str(wb.audit.events(AuditFilter(run_id=run_id, kind="result", limit=1))[0].trace_id)
        assert wb.audit.trace(key).result_verified is True
    tamper(db, f"UPDATE attempts SET latency_ms = 1.5 WHERE idempotency_key = '{key}'")
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        assert wb.audit.trace(key).result_verified is False


def test_a_later_final_row_is_named_not_called_edited(audited_db: tuple[Path, str]) -> None:
    """Resuming puts a cancelled item back; cancelling again gives it a new final row
    without an event. Its old event did not hash that row: no false alarm."""
    db, run_id = audited_db
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        key = str(wb.audit.events(AuditFilter(run_id=run_id, kind="result", limit=1))[0].trace_id)
    tamper(
        db,
        "UPDATE results SET status = 'cancelled', output_text = NULL, "
        f"finished_at = finished_at + INTERVAL 1 MINUTE WHERE idempotency_key = '{key}'",
    )
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        trace = wb.audit.trace(key)
    assert trace.result_verified is None
    assert trace.stages["stored result"].startswith("a later final row (cancelled at ")
