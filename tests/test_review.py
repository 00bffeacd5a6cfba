"""The review queue: rows sent by a cross-check, by hand, by failed checks and by
anomaly alerts; accept, correct and reject as audit change events with their actor;
the settled answers exported as a dataset a next run scores against; refusals in one
line; and the `promptlab review` commands."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from promptlab.audit.actor import acting_as
from promptlab.cli import main
from promptlab.errors import ReviewError
from promptlab.prompts.files import load_prompt_file
from promptlab.records import AlertRecord
from promptlab.store.alerts import AlertStore
from promptlab.store.audit import AuditFilter
from promptlab.workbench import Workbench

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["sim:careful", "sim:balanced", "sim:fast"]
TIMEOUT_S = 60


def crosschecked_run(
    wb: Workbench, rows: int = 12, models: list[str] = MODELS, tiebreak: Any = None
) -> str:
    """The demo's triage prompt through three simulated models, cross-checked on the
    category: they pick it apart (the simulator does not read tickets), so most rows
    go to review."""
    wb.prompts.import_file(load_prompt_file(ROOT / "data" / "demo" / "ticket-triage.yaml"))
    spec = wb.runs.spec_from_data(
        {
            "name": "triage cross-check",
            "dataset": str(ROOT / "data" / "demo" / "tickets.csv"),
            "limit_rows": rows,
            "variants": [{"prompt": "ticket-triage@production"}],
            "crosscheck": {
                "models": models,
                "field": "category",
                **({"tiebreak": tiebreak} if tiebreak else {}),
            },
        }
    )
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


def test_a_crosscheck_fills_the_queue_and_each_decision_is_audited_with_its_actor(
    tmp_path: Path, db_path: Path
) -> None:
    with Workbench.open() as wb:
        run_id = crosschecked_run(wb)
        summary = wb.review.crosscheck(run_id)
        assert summary is not None and sum(summary.decisions.values()) == 12
        opened = wb.review.list("open", run_id)
        assert len(opened) == summary.decisions.get("review", 0) >= 3
        first, second, third = opened[:3]
        detail = wb.review.show(first.id)
        assert [a.variant for a in detail.answers] == sorted(MODELS)  # side by side
        assert detail.crosscheck is not None and detail.crosscheck.decision == "review"
        assert detail.row["ticket_id"].startswith("T-")
        with acting_as("ana@example.org"):
            accepted = wb.review.accept(first.id, note="looks right")
            corrected = wb.review.correct(second.id, "billing")
            rejected = wb.review.reject(third.id)
        assert (accepted.status, accepted.answer) == ("accepted", first.proposed)
        assert (corrected.status, corrected.answer, corrected.decided_by) == (
            "corrected",
            "billing",
            "ana@example.org",
        )
        assert rejected.status == "rejected" and rejected.answer is None
        events = [
            e for e in wb.audit.events(AuditFilter(run_id=run_id)) if e.kind.startswith("review.")
        ]
        assert [(e.kind, e.actor) for e in events] == [
            ("review.accepted", "ana@example.org"),
            ("review.corrected", "ana@example.org"),
            ("review.rejected", "ana@example.org"),
        ]
        assert events[1].payload["answer"] == "billing" and events[1].payload["was"] == "open"
        assert len(wb.review.list("open", run_id)) == len(opened) - 3

        # The settled answers are the next evaluation's expected answers.
        out = tmp_path / "expected.jsonl"
        assert wb.review.export(out, run_id=run_id) == 2
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["expected"] for r in lines] == [first.proposed, "billing"]
        assert set(lines[0]) == {
            "ticket_id",
            "customer_id",
            "ticket",
            "customer_tier",
            "category",
            "expected",
        }
        info = wb.datasets.import_file(out, "triage-expected")
        assert info.row_count == 2
        spec = wb.runs.spec_from_data(
            {
                "name": "scored on reviewed",
                "dataset": "triage-expected",
                "expected": "expected",
                "scorers": [{"kind": "json_field", "path": "category"}],
                "variants": [{"prompt": "ticket-triage@production", "model": "sim:careful"}],
            }
        )
        scored = wb.runs.start(spec)
        assert wb.runs.wait(scored, timeout=TIMEOUT_S).status == "completed"
        (counts,) = wb.analysis.scores(scored)
        assert counts.scored == 2


def test_rows_are_sent_by_hand_by_failed_checks_and_by_alerts_once_each(
    tmp_path: Path, db_path: Path
) -> None:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(30)), encoding="utf-8")
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    with Workbench.open() as wb:
        spec = wb.runs.spec_from_data(
            {
                "name": "sloppy",
                "dataset": str(dataset),
                "variants": [
                    {
                        "name": "sloppy",
                        "model": "sim:sloppy",
                        "output_schema": schema,
                        "messages": [{"role": "user", "content": "Count {{ text }}"}],
                    }
                ],
            }
        )
        run_id = wb.runs.start(spec)
        assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
        by_hand = wb.review.add(run_id, [0, 1], reason="odd wording")
        assert len(by_hand) == 2 and wb.review.add(run_id, [1]) == []  # one item per row
        item = wb.review.show(by_hand[0]).item
        assert (item.source, item.reason) == ("hand", "odd wording") and item.proposed
        assert wb.review.add_alerted(run_id) == []  # 30 rows raise no alert
        # An alert over the run's first half (as the detector records one): the results
        # there that did not complete, and are not queued yet, are sent.
        with wb.store.read() as cur:
            low, high = cur.execute("SELECT min(seq), max(seq) FROM results").fetchone()
        alert = AlertRecord(
            run_id, "sloppy", "failure_rate", "many fail", low, (low + high) // 2, datetime.now(UTC)
        )
        AlertStore(wb.store).add([alert])
        alerted = wb.review.add_alerted(run_id)
        for detail in map(wb.review.show, alerted):
            assert detail.item.source == "anomaly" and detail.item.reason.startswith("failure_rate")
            (answer,) = detail.answers
            assert answer.status == "failed" or answer.check_status in ("invalid", "truncated")
        assert alerted  # the sloppy model fails some of any fifteen
        failed = wb.review.add_failed_checks(run_id)
        assert failed and not set(failed) & set(alerted)  # the rest of them
        for detail in map(wb.review.show, failed):
            assert detail.item.source == "check" and detail.item.key is not None
            (answer,) = detail.answers
            assert answer.check_status in ("invalid", "truncated")
        for bad, message in [
            (lambda: wb.review.add("run_nope", [0]), "no run with id"),
            (lambda: wb.review.add(run_id, [999]), r"no results for row 1000 \(row_index 999\)"),
            (lambda: wb.review.accept(99_999), "no item 99999"),
            (lambda: wb.review.correct(by_hand[0], "  "), "the corrected answer is empty"),
            (lambda: wb.review.correct(by_hand[0], "x" * 10_001), "over 10,000 characters"),
            (lambda: wb.review.list("maybe"), "status is one of"),
            (lambda: wb.review.export(tmp_path / "x.parquet"), "expected a .jsonl or .csv"),
        ]:
            with pytest.raises(Exception, match=message) as caught:
                bad()
            assert "\n" not in str(caught.value)
        assert isinstance(caught.value, ReviewError)
        assert wb.review.show(by_hand[0]).item.status == "open"  # nothing lost


def test_the_review_commands(tmp_path: Path, db_path: Path) -> None:
    with Workbench.open() as wb:
        run_id = crosschecked_run(wb, rows=8)
        first = wb.review.list("open", run_id)[0]
    cli = CliRunner()

    def run(*args: str) -> Any:
        result = cli.invoke(main, ["review", *args])
        return result

    listed = run("list", "--run", run_id)
    shown_row = first.row_index + 1  # rows numbered from 1, as the app numbers them
    assert listed.exit_code == 0 and f"{first.id}  {run_id} row {shown_row}" in listed.output
    shown = run("show", str(first.id))
    assert shown.exit_code == 0
    assert "cross-check: review" in shown.output and all(m in shown.output for m in MODELS)
    assert run("correct", str(first.id), "account", "--note", "read it").exit_code == 0
    assert "corrected" in run("list", "--status", "corrected").output
    out = tmp_path / "expected.csv"
    exported = run("export", str(out), "--column", "category")
    assert exported.exit_code == 0 and "wrote 1 row(s)" in exported.output
    (row,) = list(csv.DictReader(out.open(encoding="utf-8")))
    assert row["category"] == "account"
    refused = run("export", str(out))
    assert refused.exit_code != 0 and "exists" in refused.output + (refused.stderr or "")
    missing = run("accept", "424242")
    assert missing.exit_code == 1 and "no item 424242" in missing.output + (missing.stderr or "")
    assert run("add", run_id).exit_code == 2  # nothing to send named
    assert run("add", run_id, "0").exit_code == 2  # rows are numbered from 1
    sent = run("add", run_id, "1", "2", "3", "4", "5", "6", "7", "8")
    assert sent.exit_code == 0 and "sent" in sent.output
    with Workbench.open() as wb:
        assert sorted(i.row_index for i in wb.review.list(None, run_id)) == list(range(8))


def test_the_commands_status_choices_are_the_records_statuses() -> None:
    from promptlab.cli.review import STATUSES
    from promptlab.records.review import ReviewStatus

    assert [*map(str, ReviewStatus), "all"] == STATUSES
