"""`promptlab experiment ...`, `promptlab assign` and `promptlab exposures import`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from promptlab.cli import main
from promptlab.config import DEMO_DIR
from promptlab.experiments import assign, load_experiment_config
from promptlab.store import Store
from tests.test_startup import HEAVY, invoke_cli, modules_after

ROOT = Path(__file__).resolve().parent.parent
DEMO_EXPERIMENT = str(DEMO_DIR / "experiments" / "triage-split.yaml")


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "x.duckdb")
    assert run("--db", path, "prompt", "add", str(DEMO_DIR / "ticket-triage.yaml")).exit_code == 0
    assert (
        "added triage-split revision 1"
        in run("--db", path, "experiment", "add", DEMO_EXPERIMENT).output
    )
    return path


@pytest.fixture
def exported(db: str, tmp_path: Path) -> Path:
    path = tmp_path / "triage-split.config.yaml"
    assert run("--db", db, "experiment", "export", "triage-split", "-o", str(path)).exit_code == 0
    return path


def test_add_list_show_set_export(db: str, tmp_path: Path) -> None:
    assert (
        "no changes: triage-split is at revision 1"
        in run("--db", db, "experiment", "add", DEMO_EXPERIMENT).output
    )
    listed = run("--db", db, "experiment", "list").output
    assert "triage-split" in listed and "control 70%, staging 30%" in listed
    changed = run(
        "--db",
        db,
        "experiment",
        "set",
        "triage-split",
        "--weight",
        "staging=40",
        "--weight",
        "control=60",
        "--note",
        "more staging",
    )
    assert changed.exit_code == 0
    assert "revision 2: control weight 70 -> 60; staging weight 30 -> 40" in changed.output
    assert (
        "ramp 100% -> 25%"
        in run("--db", db, "experiment", "set", "triage-split", "--ramp", "25").output
    )
    assert "killed" in run("--db", db, "experiment", "set", "triage-split", "--kill").output
    assert "no changes" in run("--db", db, "experiment", "set", "triage-split", "--kill").output
    shown = run("--db", db, "experiment", "show", "triage-split").output
    assert "revision 4 of 4" in shown and "killed (all to control)" in shown
    assert "6000 (60.00%)" in shown and "[6000, 10000)" in shown
    assert "more staging" in shown and "created" in shown
    old = run("--db", db, "experiment", "show", "triage-split", "--revision", "1").output
    assert "revision 1 of 4" in old and "7000 (70.00%)" in old
    text = run("--db", db, "experiment", "export", "triage-split", "--revision", "2").output
    assert "revision: 2" in text and "- [0, 6000]" in text and "prompt_version_id: sha256:" in text


def test_usage_and_errors(db: str, tmp_path: Path) -> None:
    nothing = run("--db", db, "experiment", "set", "triage-split")
    assert nothing.exit_code == 2 and "nothing to change" in nothing.output
    bad_weight = run("--db", db, "experiment", "set", "triage-split", "--weight", "staging")
    assert bad_weight.exit_code == 2 and "expected VARIANT=WEIGHT" in bad_weight.output
    unknown = run("--db", db, "experiment", "set", "triage-split", "--weight", "nope=3")
    assert unknown.exit_code == 1 and "has no variant 'nope'" in unknown.output
    ghost = run("--db", db, "experiment", "show", "ghost")
    assert ghost.exit_code == 1 and ghost.output.strip() == "error: no experiment named 'ghost'"
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nvariants: []\n", encoding="utf-8")
    refused = run("--db", db, "experiment", "add", str(broken))
    assert refused.exit_code == 1
    assert refused.output.strip() == (
        f"error: {broken}: variants: expected a list of two or more variants"
    )
    assert run("--db", db, "assign", "triage-split").exit_code == 2  # no units


def assigned(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines()]


def test_assign_by_name_and_by_file_agree(db: str, exported: Path, tmp_path: Path) -> None:
    units = tmp_path / "units.txt"
    units.write_text("C-3\n\nC-4\n", encoding="utf-8")
    by_name = run("--db", db, "assign", "triage-split", "C-1", "C-2", "--units", str(units))
    by_file = run("--db", db, "assign", str(exported), "C-1", "C-2", "--units", str(units))
    assert by_name.exit_code == 0 and by_name.output == by_file.output
    lines = assigned(by_file.output)
    assert [line["unit"] for line in lines] == ["C-1", "C-2", "C-3", "C-4"]
    assert set(lines[0]) >= {"unit", "variant", "bucket", "prompt_version_id", "in_experiment"}
    stdin = run("--db", db, "assign", str(exported), "--units", "-", input="C-1\n")
    assert assigned(stdin.output) == lines[:1]


def test_assign_never_opens_the_database_for_a_file(exported: Path, tmp_path: Path) -> None:
    absent = tmp_path / "no" / "such" / "folder" / "x.duckdb"
    result = run("--db", str(absent), "assign", str(exported), "C-1")
    assert result.exit_code == 0 and assigned(result.output)[0]["unit"] == "C-1"
    assert not absent.parent.exists()


def test_assign_works_while_another_process_holds_the_database(db: str, exported: Path) -> None:
    with Store(db):  # this process holds the DuckDB file, as the app would
        cli = [sys.executable, "-m", "promptlab", "--db", db]
        locked = subprocess.run([*cli, "experiment", "list"], capture_output=True, text=True)
        assert locked.returncode == 1 and "in use by another process" in locked.stderr
        served = subprocess.run(
            [*cli, "assign", str(exported), "C-1", "C-2"], capture_output=True, text=True, cwd=ROOT
        )
    assert served.returncode == 0, served.stderr
    config = load_experiment_config(exported)
    assert [line["variant"] for line in assigned(served.stdout)] == [
        assign(config, "C-1").variant,
        assign(config, "C-2").variant,
    ]


@pytest.fixture(scope="module")
def demo_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One exported demo config for the module: hypothesis calls its test many times."""
    folder = tmp_path_factory.mktemp("demo")
    db = str(folder / "x.duckdb")
    run("--db", db, "prompt", "add", str(DEMO_DIR / "ticket-triage.yaml"))
    run("--db", db, "experiment", "add", DEMO_EXPERIMENT)
    path = folder / "config.yaml"
    run("--db", db, "experiment", "export", "triage-split", "-o", str(path))
    return path


unit_ids = st.text(st.characters(exclude_categories=["Cs", "Cc"]), min_size=1, max_size=30)


@settings(max_examples=5, deadline=None)
@given(units=st.lists(unit_ids.filter(lambda u: not u.startswith("-")), min_size=1, max_size=50))
def test_another_process_assigns_every_unit_the_same(demo_config: Path, units: list[str]) -> None:
    config = load_experiment_config(demo_config)
    out = subprocess.run(
        [sys.executable, "-m", "promptlab", "assign", str(demo_config), "--", *units],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    assert [(d["unit"], d["variant"], d["bucket"]) for d in assigned(out)] == [
        (u, assign(config, u).variant, assign(config, u).bucket) for u in units
    ]


def test_assign_log_then_exposures_import(db: str, exported: Path, tmp_path: Path) -> None:
    log = tmp_path / "exposures.jsonl"
    units = [f"C-{i}" for i in range(50)]
    run("--db", db, "assign", str(exported), *units[:25], "--log", str(log))
    run("--db", db, "assign", str(exported), *units[25:], "--log", str(log))  # appends
    assert len(log.read_text(encoding="utf-8").splitlines()) == 50  # ramp 100: all exposed
    imported = run("--db", db, "exposures", "import", str(log))
    assert imported.exit_code == 0 and "imported 50 new exposures" in imported.output
    assert "imported 0 new exposures" in run("--db", db, "exposures", "import", str(log)).output
    shown = run("--db", db, "experiment", "show", "triage-split").output.splitlines()
    logged = [json.loads(line)["variant"] for line in log.read_text(encoding="utf-8").splitlines()]
    for variant in ("control", "staging"):
        row = next(line for line in shown if line.startswith(f"{variant} "))
        assert row.split()[-1] == str(logged.count(variant))
    bad = tmp_path / "bad.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    bad.write_text("\n".join([lines[0], "{oops", lines[1]]) + "\n", encoding="utf-8")
    refused = run("--db", db, "exposures", "import", str(bad))
    assert refused.exit_code == 1
    assert refused.output.startswith(f"error: exposures {bad}, line 2: not valid JSON")


def test_killed_units_are_not_logged(db: str, tmp_path: Path) -> None:
    run("--db", db, "experiment", "set", "triage-split", "--kill")
    log = tmp_path / "exposures.jsonl"
    out = run("--db", db, "assign", "triage-split", "C-1", "--log", str(log)).output
    assert assigned(out)[0]["reason"] == "killed" and not log.exists()


def test_assign_on_a_file_imports_no_heavy_library(exported: Path) -> None:
    loaded = modules_after(invoke_cli("assign", str(exported), "C-1"))
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_promptlab_assign_imports_no_heavy_library() -> None:
    loaded = modules_after("import promptlab; promptlab.assign, promptlab.load_experiment_config")
    assert not loaded & set(HEAVY)


def test_experiment_run_estimates_then_runs_the_split(tmp_path: Path) -> None:
    db = str(tmp_path / "run.duckdb")
    assert run("--db", db, "init", "--demo").exit_code == 0  # loads and runs the demo once
    estimate = run(
        "--db", db, "experiment", "run", "triage-split", "--dataset", "tickets", "--estimate"
    )
    assert estimate.exit_code == 0, estimate.output
    assert estimate.output.startswith("estimate: 40 requests, ")
    # The demo run on 400 customers gave control 586 answers to learn lengths from.
    assert "control: " in estimate.output and "(output from 586 results)" in estimate.output
    assert "run run_" not in estimate.output  # nothing sent
    # 17 customers, split by their hash; too few on one side, and it says so.
    assert "units: 17 distinct customer_id (control " in estimate.output
    assert "warning: Too few units for a 70/30 split" in estimate.output
    result = run(
        "--db",
        db,
        "experiment",
        "run",
        "triage-split",
        "--dataset",
        "tickets",
        "--mode",
        "all",
        "--limit-rows",
        "5",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    assert "estimate: 10 requests" in result.output and "completed" in result.output
    bad = run("--db", db, "experiment", "run", "triage-split", "--dataset", "nope")
    assert bad.exit_code == 2 and "no dataset named 'nope'" in bad.stderr
