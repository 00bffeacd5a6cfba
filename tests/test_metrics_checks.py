"""Output-check rates per run variant and per prompt version across runs (metrics)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.store import ReadModels, Store
from promptlab.workbench import Workbench
from tests.test_engine_checks import checks_spec


def two_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    providers = tmp_path / "providers.yaml"
    providers.write_text("endpoints:\n  quick: {kind: sim, latency_scale: 0}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    with Workbench.open() as wb:
        # One spec, so one dataset write: rewriting the file while the first run is
        # still being planned from it would fail that run.
        spec = checks_spec(tmp_path)
        run_ids = [wb.runs.start(spec) for _ in range(2)]
        for run_id in run_ids:
            assert wb.runs.wait(run_id, timeout=60).status == "completed"
    return run_ids


def stored_checks(db_path: Path) -> dict[tuple[str, str], Counter[str]]:
    """Check statuses per (version id, variant) counted from the stored rows."""
    with Store(db_path) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT prompt_version_id, variant, check_status FROM results"
        ).fetchall()
    out: dict[tuple[str, str], Counter[str]] = {}
    for version, variant, status in rows:
        out.setdefault((version, variant), Counter())[status] += 1
    return out


def test_version_rates_add_up_every_run(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_ids = two_runs(tmp_path, monkeypatch)
    counted = stored_checks(db_path)
    with Store(db_path) as store:
        wb = Workbench(store)
        versions = {r.prompt_version_id: r for r in wb.analysis.metrics()}
        json_id = next(v for v, name in counted if name == "json")
        plain_id = next(v for v, name in counted if name == "plain")
        statuses = counted[(json_id, "json")]
        row = versions[json_id]
        assert row.runs == 2
        checked = sum(statuses[s] for s in ("valid", "repaired", "invalid", "truncated"))
        assert row.checked == checked == row.succeeded
        assert row.validity_rate == pytest.approx(statuses["valid"] / checked)
        assert row.repair_rate == pytest.approx(statuses["repaired"] / checked)
        assert row.invalid_rate == pytest.approx(statuses["invalid"] / checked)
        assert row.truncation_rate == pytest.approx(statuses["truncated"] / checked)
        assert row.rule_failure_rate == 0.0  # a schema, no rules
        assert row.repair_rate > 0 and row.truncation_rate > 0
        # No schema: nothing checked, no rates.
        plain = versions[plain_id]
        assert plain.checked == 0 and plain.validity_rate is None
        # Per run variant, the same figures as the Runs page's.
        for run_id in run_ids:
            metrics = {r.variant: r for r in wb.analysis.metrics(run_id=run_id)}
            summary = {v.name: v for v in ReadModels(store).variant_summaries(run_id)}
            for name in ("json", "plain"):
                m, s = metrics[name], summary[name]
                assert (m.checked, m.valid, m.repaired, m.invalid, m.truncated) == (
                    s.checked,
                    s.valid,
                    s.repaired,
                    s.invalid,
                    s.truncated,
                )
                assert m.validity_rate == s.validity_rate
                assert m.rule_failure_rate == s.rule_failure_rate
    shown = CliRunner().invoke(main, ["metrics"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert "output checks (shares of the checked outputs):" in shown.output
    checks_part = shown.output.split("output checks")[1]
    assert f"{row.validity_rate:.1%}" in checks_part
    assert f"{row.truncation_rate:.1%}" in checks_part
    assert len([x for x in checks_part.splitlines() if "%" in x]) == 1  # plain: no checks
    as_json = json.loads(
        CliRunner().invoke(main, ["metrics", "--json"], catch_exceptions=False).output
    )
    by_id = {r["prompt_version_id"]: r for r in as_json}
    assert by_id[json_id]["truncation_rate"] == pytest.approx(row.truncation_rate)
    assert by_id[json_id]["checked"] == checked
