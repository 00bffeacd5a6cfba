"""Metrics per variant and version in DuckDB, and `Workbench.compare` on real runs.

Two runs of the demo experiment on the simulated model (a 70/30 split by customer and
an all-mode run: conftest's `runs`) are made once per session; each figure is checked
against the same figure computed here from the stored rows with numpy and scipy.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chisquare
from scipy.stats import t as student_t

from promptlab.analysis.compare import parse_since
from promptlab.analysis.intervals import completion_interval
from promptlab.analysis.stats import MIN_UNITS_PER_ARM, Verdict
from promptlab.config import Settings
from promptlab.errors import NotFoundError, PromptlabError
from promptlab.experiments import expected_shares
from promptlab.store import Store
from promptlab.store.metrics import completed_predicate
from promptlab.workbench import Workbench


def settings(path: Path) -> Settings:
    return Settings.from_env({"PROMPTLAB_DB": str(path), "PROMPTLAB_AUTHOR": "tester"})


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> Path:
    """A copy of the session's database (conftest's `runs`), so a test may change it."""
    copy = tmp_path / "copy.duckdb"
    shutil.copy(runs[0], copy)
    return copy


@pytest.fixture
def wb(db: Path) -> Iterator[Workbench]:
    with Store(db) as store, Workbench(store, settings(db)) as bench:
        yield bench


def latencies(wb: Workbench, run_id: str, variant: str) -> np.ndarray:
    with wb.store.read() as cur:
        rows = cur.execute(
            "SELECT latency_ms FROM results WHERE run_id = ? AND variant = ? "
            "AND status = 'succeeded'",
            [run_id, variant],
        ).fetchall()
    return np.array([r[0] for r in rows])


def test_run_metrics_match_the_stored_rows(wb: Workbench, runs: tuple[Path, str, str]) -> None:
    split = runs[1]
    rows = wb.analysis.metrics(run_id=split)
    assert [r.variant for r in rows] == ["control", "staging"]
    assert sum(r.finished for r in rows) == 40
    for row in rows:
        x = latencies(wb, split, row.variant or "")
        assert row.finished == row.succeeded == x.size and row.failed == 0
        # Every output passes here (with output checks, completion may count fewer).
        assert row.completed <= row.succeeded
        assert row.completion_rate == row.completed / row.finished
        assert row.prompt_name == "ticket-triage" and row.model == "sim:careful"
        quantiles = np.quantile(x, [0.5, 0.9, 0.95, 0.99])
        found = [row.latency_p50_ms, row.latency_p90_ms, row.latency_p95_ms, row.latency_p99_ms]
        assert found == pytest.approx(quantiles.tolist())
        assert row.latency_mean_ms == pytest.approx(x.mean())
        assert row.input_tokens > 0 and row.cost_usd > 0 and row.open == 0
        ci = completion_interval(row)
        assert ci.low < 1.0 == ci.high


def test_version_metrics_add_up_every_run_of_each_version(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    rows = wb.analysis.metrics(prompt="ticket-triage", since="7d")
    assert [r.label for r in rows] == ["ticket-triage@1.1.0", "ticket-triage@2.0.0"]
    assert all(r.runs == 2 and r.run_id is None for r in rows)
    assert sum(r.finished for r in rows) == 40 + 80
    by_run = {r.prompt_version_id: r.finished for r in wb.analysis.metrics(run_id=runs[1])}
    for row in rows:
        assert row.finished == by_run[row.prompt_version_id] + 40  # + its all-mode items
    assert wb.analysis.metrics() == rows  # the demo's only prompt with results
    assert (
        wb.analysis.metrics(prompt="ticket-triage", since=datetime.now(UTC) + timedelta(hours=1))
        == []
    )
    assert wb.analysis.metrics(prompt="article-summarizer") == []
    with pytest.raises(NotFoundError, match="no prompt named 'nope'"):
        wb.analysis.metrics(prompt="nope")


def test_compare_a_split_run_counts_customers_not_results(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    split = runs[1]
    comparison = wb.analysis.compare(split)
    assert (comparison.mode, comparison.control, comparison.paired) == ("split", "control", False)
    # The run has finished: its final look, the fixed-horizon test at 4% of the 5%.
    assert comparison.method == "fixed horizon, final look (4% of 5%)"
    assert [(r.variant, r.metric) for r in comparison.rows] == [
        ("staging", "completion rate"),
        ("staging", "latency p50"),
        ("staging", "latency p90"),
        ("staging", "latency p99"),
    ]
    with wb.store.read() as cur:
        per_unit = cur.execute(
            "SELECT r.variant, a.unit_id, count(*) FROM results r JOIN assignments a "
            "USING (run_id, row_index) WHERE r.run_id = ? GROUP BY ALL",
            [split],
        ).fetchall()
    units = {v: sum(1 for row in per_unit if row[0] == v) for v in ("control", "staging")}
    requests = {v: sum(row[2] for row in per_unit if row[0] == v) for v in ("control", "staging")}
    assert comparison.arms == {v: (units[v], requests[v]) for v in units}
    completion = comparison.rows[0]
    # n is customers (17 in the dataset, a handful on staging), requests are results.
    assert (completion.n_control, completion.n_variant) == (units["control"], units["staging"])
    assert (completion.requests_control, completion.requests_variant) == (
        requests["control"],
        requests["staging"],
    )
    assert units["staging"] < MIN_UNITS_PER_ARM
    for row in comparison.rows:
        assert row.verdict == Verdict.TOO_FEW and row.adjusted_p is None
        assert row.reason.startswith("too few units (")
        assert row.analysed_by == "unit"
    # SRM: distinct customers per variant against the experiment's 70/30; too few to judge.
    srm = comparison.srm
    assert srm is not None
    with wb.store.read() as cur:
        assigned = dict(
            cur.execute(
                "SELECT variant, count(DISTINCT unit_id) FROM assignments WHERE run_id = ? "
                "GROUP BY variant",
                [split],
            ).fetchall()
        )
    assert srm.observed == assigned and sum(assigned.values()) == 17
    shares = expected_shares(wb.experiments.get("triage-split"))
    assert srm.expected == pytest.approx({k: 17 * v for k, v in shares.items()})
    names = list(srm.observed)
    assert srm.p_value == pytest.approx(
        chisquare([assigned[n] for n in names], [17 * shares[n] for n in names]).pvalue
    )
    assert not srm.mismatch and not srm.judged


def test_compare_an_all_mode_run_pairs_rows(wb: Workbench, runs: tuple[Path, str, str]) -> None:
    paired = runs[2]
    comparison = wb.analysis.compare(paired)
    assert (comparison.mode, comparison.paired, comparison.srm) == ("all", True, None)
    completion = comparison.rows[0]
    assert (completion.n_control, completion.n_variant) == (40, 40)
    assert completion.test == "paired delta method per row"
    assert completion.analysed_by == "row"
    xa, xb = latencies(wb, paired, "control"), latencies(wb, paired, "staging")
    for row, q in zip(comparison.rows[1:], (0.5, 0.9, 0.99), strict=True):
        assert row.control_value == pytest.approx(np.quantile(xa, q))
        assert row.effect == pytest.approx(np.quantile(xb, q) - np.quantile(xa, q))
    p50, p90, p99 = comparison.rows[1:]
    assert p50.test == "paired delta method (quantile) per row"
    assert p50.interval is not None
    # One method gives both: the interval excludes 0 exactly when p < 0.05.
    assert p50.interval.excludes_zero() == (p50.p_value < 0.05)
    # 40 pairs leave 4 beyond p90 and none beyond p99: too thin a tail for a verdict.
    assert p90.verdict == p99.verdict == Verdict.TOO_FEW and p90.adjusted_p is None
    assert p90.reason == "too few requests beyond p90 (4; a verdict needs 20 in each arm)"
    assert wb.analysis.compare(paired).rows == comparison.rows


def test_compare_names_variants_and_refuses_what_it_cannot_compare(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    swapped = wb.analysis.compare(runs[2], "staging", "control")
    assert swapped.control == "staging" and {r.variant for r in swapped.rows} == {"control"}
    with pytest.raises(PromptlabError, match=r"no variant 'nope' \(variants: control, staging\)"):
        wb.analysis.compare(runs[2], "control", "nope")
    with pytest.raises(PromptlabError, match="not itself"):
        wb.analysis.compare(runs[2], "control", "control")
    with pytest.raises(PromptlabError, match="no run with id 'run_nope'"):
        wb.analysis.compare("run_nope")


def test_completion_counts_only_outputs_that_passed_their_checks(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    paired = runs[2]
    # The columns output checks add (migration 0005_output_checks), set by hand here.
    with wb.store.transaction() as cur:
        cur.execute("ALTER TABLE results ADD COLUMN IF NOT EXISTS check_status VARCHAR")
        cur.execute("ALTER TABLE results ADD COLUMN IF NOT EXISTS rule_status VARCHAR")
        cur.execute(
            "UPDATE results SET check_status = CASE WHEN row_index < 3 THEN 'invalid' "
            "WHEN row_index = 3 THEN 'truncated' ELSE 'valid' END, "
            "rule_status = CASE WHEN row_index = 4 THEN 'failed' ELSE 'passed' END "
            "WHERE run_id = ? AND variant = 'staging'",
            [paired],
        )
        cur.execute(
            "UPDATE results SET check_status = NULL, rule_status = NULL "
            "WHERE run_id = ? AND variant = 'control'",
            [paired],
        )
    rows = {r.variant: r for r in wb.analysis.metrics(run_id=paired)}
    assert (rows["control"].completed, rows["staging"].completed) == (40, 35)
    assert rows["staging"].succeeded == 40 and rows["staging"].completion_rate == 35 / 40
    completion = wb.analysis.compare(paired).rows[0]
    assert completion.effect == pytest.approx(-5 / 40)
    # One pair per row: the paired difference is -1 on 5 rows and 0 on 35.
    diffs = np.array([-1.0] * 5 + [0.0] * 35)
    z = diffs.mean() / (diffs.std(ddof=1) / np.sqrt(diffs.size))
    # Student's t on 39 degrees of freedom: the paired t-test of the row differences is
    # the row's p; its adjusted p is on the family's scale (the final look has 4% of the
    # 5%: p x 1.25) before Holm over the family's tests.
    own = 2 * student_t.sf(abs(z), 39)
    assert completion.p_value == pytest.approx(own)
    assert completion.look_alpha == pytest.approx(0.04)
    assert completion.adjusted_p is not None and completion.adjusted_p >= own * 1.25


def test_the_completion_predicate_follows_the_columns_present() -> None:
    assert completed_predicate({"status"}) == "status = 'succeeded'"
    both = completed_predicate({"status", "check_status", "rule_status"})
    assert "IN ('valid', 'repaired', 'no_schema')" in both and "'failed'" in both


def test_parse_since() -> None:
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    assert parse_since("7d", now) == datetime(2026, 11, 23, 12, tzinfo=UTC)
    assert parse_since("24h", now) == datetime(2026, 11, 29, 12, tzinfo=UTC)
    assert parse_since("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(PromptlabError, match="--since: expected an age like 7d"):
        parse_since("last week")
    with pytest.raises(PromptlabError, match="--since: '99999999d' reaches before year 1"):
        parse_since("99999999d", now)


def test_a_variant_that_never_answered_has_no_latency_to_compare(
    wb: Workbench, runs: tuple[Path, str, str]
) -> None:
    paired = runs[2]
    with wb.store.transaction() as cur:
        cur.execute(
            "UPDATE results SET status = 'failed', error_kind = 'timeout', latency_ms = NULL "
            "WHERE run_id = ? AND variant = 'staging'",
            [paired],
        )
    staging = wb.analysis.metrics(run_id=paired)[1]
    assert (staging.failed, staging.failed_by_kind, staging.latency_p50_ms) == (
        40,
        {"timeout": 40},
        None,
    )
    completion, *latency = wb.analysis.compare(paired).rows
    # Every pair went one way: no spread at all, so the difference is certain.
    assert completion.effect == -1.0 and completion.p_value == 0.0
    assert completion.verdict == Verdict.WORSE
    assert {(r.test, r.effect, r.verdict) for r in latency} == {
        ("no data", None, Verdict.UNDECIDED)
    }
    assert {r.reason for r in latency} == {"no data to compare"}
