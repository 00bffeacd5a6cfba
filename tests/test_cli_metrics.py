"""`promptlab metrics` and `promptlab compare` on stored runs of the demo experiment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.store import Store
from tests.test_startup import HEAVY, invoke_cli, modules_after


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> str:
    copy = tmp_path / "cli.duckdb"
    shutil.copy(runs[0], copy)
    return str(copy)


def first_table(output: str) -> list[str]:
    """The metrics table: the lines before the output-check table (when there is one)."""
    return output.split("output checks (")[0].splitlines()


def test_metrics_of_a_run_one_row_per_variant(db: str, runs: tuple[Path, str, str]) -> None:
    result = cli("--db", db, "metrics", "--run", runs[1])
    assert result.exit_code == 0, result.output
    lines = first_table(result.output)
    assert lines[0].split()[:6] == ["variant", "model", "items", "ok", "failed", "complete"]
    assert "p99 ms" in lines[0] and "95% interval" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["control", "staging"]


def test_the_retrospective_query_is_one_line(db: str) -> None:
    result = cli("--db", db, "metrics", "--prompt", "ticket-triage", "--since", "7d")
    assert result.exit_code == 0, result.output
    rows = first_table(result.output)[1:]
    assert [r.split()[0] for r in rows] == ["ticket-triage@1.1.0", "ticket-triage@2.0.0"]
    data = json.loads(cli("--db", db, "metrics", "--prompt", "ticket-triage", "--json").output)
    assert [d["prompt_version"] for d in data] == ["1.1.0", "2.0.0"]
    assert sum(d["finished"] for d in data) == 120
    assert {"completion_rate", "completion_low", "latency_p90_ms", "cost_usd"} <= set(data[0])
    later = cli("--db", db, "metrics", "--since", "2999-01-01")
    assert later.output == "no results since 2999-01-01\n"


def test_compare_prints_the_table_and_the_srm_line(db: str, runs: tuple[Path, str, str]) -> None:
    result = cli("--db", db, "compare", "--run", runs[1])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == (
        f"run {runs[1]}: split mode (independent samples), control control, fixed horizon, "
        "final look (4% of 5%)"
    )
    # Then which metric decides (none declared: completion, with the rest as guardrails).
    assert lines[1] == (
        "decides: completion rate (primary, by default); guardrails: CTR, latency p50, "
        "latency p90, latency p99"
    )
    # The answer first: 17 customers cannot decide anything yet, and it says so.
    assert lines[2].startswith("staging against control: too few units to judge completion rate")
    header = lines[3]
    for column in (
        "metric",
        "control",
        "delta",
        "interval",
        "adj p",
        "method",
        "verdict",
        "units",
        "requests",
        "why",
    ):
        assert column in header
    assert [line.split()[1] for line in lines[4:8]] == ["completion", "latency"] + ["latency"] * 2
    assert all("too few units (" in line for line in lines[4:8])
    assert lines[8].startswith("SRM check: cannot judge yet: an arm has fewer than 20 units")
    data = json.loads(cli("--db", db, "compare", "--run", runs[1], "--json").output)
    assert data["control"] == "control" and data["srm"]["mismatch"] is False
    assert data["srm"]["judged"] is False and data["method"].startswith("fixed horizon, final")
    assert data["answer"] == [lines[2]] and data["family"]["primary"] == "completion rate"
    assert [r["metric"] for r in data["rows"]][:2] == ["completion rate", "latency p50"]
    for row in data["rows"]:
        assert row["verdict"] == "too few units" and row["analysed_by"] == "unit"
        assert row["n_control"] + row["n_variant"] <= 17 < row["requests_control"]
    assert sum(arm["units"] for arm in data["arms"].values()) <= 17


def test_a_broken_split_is_said_loudly(db: str, runs: tuple[Path, str, str]) -> None:
    with Store(Path(db)) as store, store.transaction() as cur:
        cur.execute(
            "INSERT INTO assignments SELECT run_id, experiment, revision, 'extra-' || i, "
            "1000 + i, 'control', 0, true FROM assignments, range(300) t(i) "
            "WHERE run_id = ? AND row_index = 0",
            [runs[1]],
        )
    result = cli("--db", db, "compare", "--run", runs[1])
    assert result.exit_code == 0
    assert "!! SAMPLE RATIO MISMATCH: chi-square" in result.output
    assert "fix the assignment before trusting this comparison" in result.output


def test_compare_errors_are_one_line(db: str, runs: tuple[Path, str, str]) -> None:
    unknown = cli("--db", db, "compare", "--run", "run_nope")
    assert (unknown.exit_code, unknown.output) == (1, "error: no run with id 'run_nope'\n")
    one = cli("--db", db, "compare", "--run", runs[2], "control")
    assert one.exit_code == 2 and "give two variants" in one.output
    bad = cli("--db", db, "compare", "--run", runs[2], "control", "nope")
    assert bad.exit_code == 1 and "has no variant 'nope'" in bad.output
    since = cli("--db", db, "metrics", "--since", "yesterday")
    assert since.exit_code == 1 and since.output.startswith("error: --since: expected")


@pytest.mark.parametrize("command", ["metrics", "compare"])
def test_help_stays_light(command: str) -> None:
    assert not modules_after(invoke_cli(command, "--help")) & set(HEAVY)


def test_compare_says_the_sample_size_for_a_chosen_effect(
    db: str,
    runs: tuple[Path, str, str],
) -> None:
    result = cli("--db", db, "compare", "--run", runs[1], "--mde", "5")
    # Control completed everything: 5 points down from 100% (statsmodels'
    # samplesize_proportions_2indep_onetail(-0.05, 1 - 1e-9, 0.8) = 151.8).
    assert result.output.splitlines()[-1] == (
        "sample size: 152 units per arm detect a change of -5.0 pp from control's 100.0% "
        "completion (alpha 0.05, power 80%; 147 more than the smaller arm's 5)"
    )
    data = json.loads(cli("--db", db, "compare", "--run", runs[1], "--mde", "5", "--json").output)
    assert data["units_needed"] == {
        "base": 1.0,
        "change": -0.05,
        "per_arm": 152,
        "have": 5,
        "more": 147,
        "unit": "units",
    }
    assert (
        json.loads(cli("--db", db, "compare", "--run", runs[1], "--json").output)["units_needed"]
        is None
    )
