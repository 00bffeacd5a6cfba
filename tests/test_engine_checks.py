"""Output checks in real runs: every succeeded result of a variant with an output schema
is checked as it is recorded; statuses, error paths and the per-variant rates."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from promptlab.checks.validation import CheckStatus, check_output
from promptlab.cli import main
from promptlab.cli.runs import CHECK_STATUSES
from promptlab.engine import RunSpec, parse_spec
from promptlab.store import ReadModels, Store
from promptlab.workbench import Workbench

ROWS = 150
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["category", "priority", "summary"],
    "additionalProperties": False,
    "properties": {
        "category": {"type": "string", "enum": ["billing", "bug", "account", "other"]},
        "priority": {"type": "string", "enum": ["low", "normal", "high", "urgent"]},
        "summary": {"type": "string", "maxLength": 200},
    },
}
MESSAGES = [{"role": "user", "content": "Triage this ticket as JSON: {{ ticket }}"}]


def checks_spec(tmp_path: Path) -> RunSpec:
    """The sloppy simulated model (often breaks JSON) with a schema, and a plain variant."""
    dataset = tmp_path / "tickets.jsonl"
    dataset.write_text(
        "".join(json.dumps({"ticket": f"ticket number {i}"}) + "\n" for i in range(ROWS))
    )
    return parse_spec(
        {
            "name": "checks",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "json",
                    "messages": MESSAGES,
                    "model": "quick:sloppy",
                    "params": {"max_tokens": 200, "temperature": 1.0},
                    "output_schema": SCHEMA,
                },
                {"name": "plain", "messages": MESSAGES, "model": "quick:fast"},
            ],
            "limits": {"quick": {"rpm": 600_000, "concurrency": 32}},
        }
    )


@pytest.fixture
def checked_run(tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    # A simulated endpoint that answers at once: the checks, not the latency, are tested.
    providers = tmp_path / "providers.yaml"
    providers.write_text("endpoints:\n  quick: {kind: sim, latency_scale: 0}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    with Workbench.open() as wb:
        run_id = wb.runs.start(checks_spec(tmp_path))
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
    return run_id


def stored(db_path: Path, run_id: str) -> list[tuple[Any, ...]]:
    with Store(db_path) as store, store.read() as cur:
        return cur.execute(
            "SELECT variant, status, output_text, finish_reason, check_status, check_errors "
            "FROM results WHERE run_id = ? ORDER BY seq",
            [run_id],
        ).fetchall()


def test_every_result_is_checked_when_recorded(db_path: Path, checked_run: str) -> None:
    rows = stored(db_path, checked_run)
    assert len(rows) == 2 * ROWS and all(r[1] == "succeeded" for r in rows)
    json_rows = [r for r in rows if r[0] == "json"]
    # The stored status and errors are exactly what checking the stored output gives.
    for _variant, _status, text, finish, status, errors in json_rows:
        check = check_output(text, SCHEMA, finish)
        assert status == check.status.value
        assert json.loads(errors) == list(check.errors)
    statuses = Counter(r[4] for r in json_rows)
    # The sloppy model at temperature 1 breaks some of everything.
    assert set(statuses) == {"valid", "repaired", "invalid", "truncated"}, statuses
    assert statuses["valid"] > ROWS / 2
    invalid_errors = [e for r in json_rows if r[4] == "invalid" for e in json.loads(r[5])]
    assert invalid_errors and all(e.startswith("$") and ": " in e for e in invalid_errors)
    assert any(
        e.startswith(("$.category: ", "$.priority: ", "$.summary: ")) for e in invalid_errors
    )
    truncated = [r for r in json_rows if r[4] == "truncated"]
    assert all(json.loads(r[5])[0].startswith("$: cut off") for r in truncated)
    # Cut off at the token limit, or ending with brackets left open whatever it says.
    assert all((r[3] == "length") == ("token limit" in json.loads(r[5])[0]) for r in truncated)
    # No schema, nothing to check.
    assert {r[4] for r in rows if r[0] == "plain"} == {"no_schema"}
    assert {r[5] for r in rows if r[0] == "plain"} == {"[]"}


def test_variant_rates_follow_the_new_completion_definition(
    db_path: Path, checked_run: str
) -> None:
    statuses = Counter(r[4] for r in stored(db_path, checked_run) if r[0] == "json")
    with Store(db_path) as store:
        summaries = {v.name: v for v in ReadModels(store).variant_summaries(checked_run)}
    json_v, plain = summaries["json"], summaries["plain"]
    assert json_v.succeeded == ROWS and json_v.checked == ROWS
    assert (json_v.valid, json_v.repaired, json_v.invalid, json_v.truncated) == (
        statuses["valid"],
        statuses["repaired"],
        statuses["invalid"],
        statuses["truncated"],
    )
    assert json_v.completed == statuses["valid"] + statuses["repaired"]
    assert json_v.completion_rate == pytest.approx(json_v.completed / ROWS)
    assert json_v.completion_rate < 1.0
    assert json_v.validity_rate == pytest.approx(statuses["valid"] / ROWS)
    assert json_v.repair_rate == pytest.approx(statuses["repaired"] / ROWS)
    assert json_v.truncation_rate == pytest.approx(statuses["truncated"] / ROWS)
    assert plain.completion_rate == 1.0 and plain.checked == 0
    assert plain.validity_rate is None and plain.truncation_rate is None


def test_field_breakdown_names_the_paths_that_fail_most(db_path: Path, checked_run: str) -> None:
    rows = stored(db_path, checked_run)
    with Workbench.open() as wb:
        fields = wb.runs.field_failures(checked_run)
        view = wb.runs.view(checked_run)
    assert fields and tuple(fields) == view.field_failures[: len(fields)]
    assert all(f.variant == "json" for f in fields)
    assert [f.outputs for f in fields] == sorted((f.outputs for f in fields), reverse=True)
    for f in fields:
        having = [
            r
            for r in rows
            if r[4] in ("invalid", "truncated")
            and any(e.startswith(f"{f.path}: ") for e in json.loads(r[5]))
        ]
        assert f.outputs == len(having), f.path


def test_item_view_carries_the_check(db_path: Path, checked_run: str) -> None:
    with Workbench.open() as wb:
        page = wb.runs.items(checked_run, variant="json", limit=ROWS)
        views = [wb.runs.item(checked_run, r.key) for r in page.rows]
    invalid = [v for v in views if v.check_status == CheckStatus.INVALID]
    assert invalid and all(v.check_errors for v in invalid)
    valid = next(v for v in views if v.check_status == CheckStatus.VALID)
    assert valid.check_errors == () and valid.output_json is not None


def test_status_shows_the_rates_and_the_failing_fields(checked_run: str) -> None:
    with Workbench.open() as wb:
        view = wb.runs.view(checked_run)
    result = CliRunner().invoke(main, ["status", checked_run])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.strip().startswith("variant "))
    assert header.split()[6:10] == ["complete", "valid", "repaired", "truncated"]
    json_v = next(v for v in view.variants if v.name == "json")
    row = next(line for line in lines if line.strip().startswith("json "))
    assert row.split()[6:10] == [
        f"{x:.1%}"
        for x in (
            json_v.completion_rate,
            json_v.validity_rate,
            json_v.repair_rate,
            json_v.truncation_rate,
        )
        if x is not None
    ]
    plain = next(line for line in lines if line.strip().startswith("plain "))
    assert plain.split()[6:10] == ["100.0%", "-", "-", "-"]
    at = lines.index("  output fields that fail most:")
    top = view.field_failures[0]
    assert lines[at + 2].split()[:3] == ["json", top.path, str(top.outputs)]


def test_status_item_shows_the_check_and_every_error(checked_run: str) -> None:
    with Workbench.open() as wb:
        page = wb.runs.items(checked_run, variant="json", limit=ROWS)
        key = next(r.key for r in page.rows if r.check_status == "invalid")
        errors = wb.runs.item(checked_run, key).check_errors
    listed = CliRunner().invoke(main, ["status", checked_run, "--items", "--check", "invalid"])
    lines = listed.stdout.splitlines()
    assert lines[1].split()[4:7] == ["status", "error", "check"]
    assert len(lines) - 2 == len([r for r in page.rows if r.check_status == "invalid"])
    assert all(line.split()[6] == "invalid" for line in lines[2:])
    assert tuple(CheckStatus) == CHECK_STATUSES
    result = CliRunner().invoke(main, ["status", checked_run, "--item", key])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    at = lines.index("check: invalid")
    assert lines[at + 1 : at + 1 + len(errors)] == [f"  {e}" for e in errors]
