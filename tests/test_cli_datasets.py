"""`promptlab dataset ...` end to end, through click's runner and a real DuckDB file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.config import DEMO_DIR


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "cli.duckdb")
    assert run("--db", path, "prompt", "add", str(DEMO_DIR / "ticket-triage.yaml")).exit_code == 0
    return path


def test_import_list_show_unit_delete(db: str) -> None:
    imported = run(
        "--db",
        db,
        "dataset",
        "import",
        str(DEMO_DIR / "tickets.csv"),
        "--name",
        "tickets",
        "--unit-column",
        "customer_id",
    )
    assert imported.exit_code == 0, imported.output
    assert imported.output == (
        "imported tickets: 40 rows, 5 columns, unit column customer_id (from tickets.csv)\n"
    )
    listed = run("--db", db, "dataset", "list").output
    assert listed.splitlines()[0].split() == [
        "NAME",
        "ROWS",
        "COLUMNS",
        "UNIT",
        "SOURCE",
        "IMPORTED",
    ]
    assert listed.splitlines()[1].split()[:5] == [
        "tickets",
        "40",
        "5",
        "customer_id",
        "tickets.csv",
    ]

    shown = run("--db", db, "dataset", "show", "tickets", "--rows", "2").output
    assert "tickets: 40 rows from tickets.csv (csv)" in shown
    assert "unit column: customer_id" in shown
    assert "customer_tier  VARCHAR" in shown
    assert '1: {"ticket_id": "T-1001", "customer_id": "C-' in shown
    assert "\n2: " in shown and "\n3: " not in shown

    assert run("--db", db, "dataset", "unit", "tickets", "ticket_id").output == (
        "tickets: unit column ticket_id\n"
    )
    assert run("--db", db, "dataset", "delete", "tickets").output == "deleted tickets\n"
    assert "no datasets yet" in run("--db", db, "dataset", "list").output


def test_check_lists_bad_rows_and_exits_1(db: str, tmp_path: Path) -> None:
    data = tmp_path / "tickets.csv"
    data.write_text(
        "ticket,customer_tier\nfine,pro\nalso fine,free\nbad plan,gold\n" + "x" * 4001 + ",pro\n",
        encoding="utf-8",
    )
    assert run("--db", db, "dataset", "import", str(data), "--name", "t").exit_code == 0
    result = run("--db", db, "dataset", "check", "t", "ticket-triage@staging")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "row 3, column customer_tier: 'gold' is not one of ['free', 'pro', 'enterprise']",
        "row 4, column ticket: 4001 characters, at most 4000",
        "2 of 4 rows valid for ticket-triage@staging, 2 bad",
    ]
    limited = run("--db", db, "dataset", "check", "t", "ticket-triage@staging", "--listed", "1")
    assert limited.output.splitlines()[-1] == (
        "2 of 4 rows valid for ticket-triage@staging, 2 bad (1 more not listed)"
    )
    good = run("--db", db, "dataset", "check", "t", "ticket-triage@production")
    # production has no customer_tier variable: the extra column is ignored
    assert good.exit_code == 1 and "row 4, column ticket" in good.output
    assert "row 3" not in good.output


def test_errors_are_one_line_on_stderr(db: str, tmp_path: Path) -> None:
    bad = tmp_path / "few.csv"
    bad.write_text("a,b,c\n1,2,3\n4,5\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(main, ["--db", db, "dataset", "import", str(bad), "--name", "few"])
    assert result.exit_code == 1
    assert result.stderr == "error: few.csv, line 3: expected 3 fields, found 2\n"
    assert "no datasets yet" in run("--db", db, "dataset", "list").output

    good = tmp_path / "ok.csv"
    good.write_text("a\n1\n", encoding="utf-8")
    assert run("--db", db, "dataset", "import", str(good), "--name", "ok").exit_code == 0
    again = runner.invoke(main, ["--db", db, "dataset", "import", str(good), "--name", "ok"])
    assert again.exit_code == 1 and "already exists" in again.stderr
    replaced = run("--db", db, "dataset", "import", str(good), "--name", "ok", "--replace")
    assert replaced.exit_code == 0

    missing = runner.invoke(main, ["--db", db, "dataset", "show", "nope"])
    assert missing.stderr == "error: no dataset named 'nope' (known: ok)\n"
    unit = runner.invoke(main, ["--db", db, "dataset", "unit", "ok", "user"])
    assert unit.stderr == "error: ok: unit column 'user' is not a column; columns: a\n"
    fmt = runner.invoke(
        main, ["--db", db, "dataset", "import", str(good), "--name", "x", "--format", "xml"]
    )
    assert fmt.exit_code == 2  # click refuses an unknown --format before anything runs
