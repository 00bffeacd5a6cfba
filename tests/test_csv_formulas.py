"""Issue 37, item 7: every CSV the product writes is safe to open in a spreadsheet.

Text cells beginning with `=`, `+`, `-`, `@`, a tab or a carriage return get a leading
`'` (OWASP's rule against CSV injection) in `promptlab export`, `promptlab review
export`, the API's `/v1/exports/{table}` and the app's downloads; numbers stay numbers;
`--raw` (`raw=true`) writes the cells exactly; JSON Lines and Parquet are unchanged.
The hostile cells are planted in a copy of the demo runs' database, as a model answer,
a variant's name, a comparison's reason, a dataset row and a reviewer's correction.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import shutil
from pathlib import Path
from urllib.parse import quote

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.workbench import Workbench
from tests.test_server import Served
from tests.test_server_data import get_raw

pytestmark = pytest.mark.timeout(120)

#: Cells a spreadsheet would run (or, after a leading tab or CR, might).
HOSTILE = (
    '=HYPERLINK("http://x","y")',
    "=1+1",
    "@SUM(A1)",
    "+cmd|' /C calc'!A0",
    "-2+3",
    "\t=1+1",
    "\r=1+1",
)
#: First characters of a cell a spreadsheet reads as a formula (OWASP).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: A stored number that begins with `-` and must stay a number.
NEGATIVE_LATENCY = -12.5


@pytest.fixture
def hostile(runs: tuple[Path, str, str], tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    """(database, split run id, {idempotency key: hostile output}): the first results of
    the split run answer with a formula each; the first of them took -12.5 ms."""
    db = tmp_path / "hostile.duckdb"
    shutil.copy(runs[0], db)
    run_id = runs[1]
    con = duckdb.connect(str(db))
    try:
        keys = [
            r[0]
            for r in con.execute(
                "SELECT idempotency_key FROM results WHERE run_id = ? ORDER BY seq LIMIT ?",
                [run_id, len(HOSTILE)],
            ).fetchall()
        ]
        planted = dict(zip(keys, HOSTILE, strict=True))
        for key, text in planted.items():
            con.execute("UPDATE results SET output_text = ? WHERE idempotency_key = ?", [text, key])
        con.execute(
            "UPDATE results SET latency_ms = ? WHERE idempotency_key = ?",
            [NEGATIVE_LATENCY, keys[0]],
        )
    finally:
        con.close()
    return db, run_id, planted


def cli(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def csv_rows(data: bytes | str) -> list[dict[str, str]]:
    text = data.decode() if isinstance(data, bytes) else data
    return list(csv.DictReader(io.StringIO(text, newline="")))


def formula_cells(rows: list[dict[str, str]]) -> list[str]:
    """Every cell (header included) a spreadsheet would run: begins with a formula
    character and is not a plain number."""
    cells = [c for row in rows for c in (*row, *row.values()) if c]
    return [c for c in cells if c.startswith(FORMULA_STARTS) and not _is_number(c)]


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def outputs(rows: list[dict[str, str]], planted: dict[str, str]) -> dict[str, str]:
    key = "key" if "key" in rows[0] else "idempotency_key"
    return {r[key]: r["output_text"] for r in rows if r[key] in planted}


def assert_neutralised(rows: list[dict[str, str]], planted: dict[str, str]) -> None:
    assert formula_cells(rows) == []
    assert outputs(rows, planted) == {k: "'" + v for k, v in planted.items()}
    first = next(iter(planted))
    key = "key" if "key" in rows[0] else "idempotency_key"
    (latency,) = [r["latency_ms"] for r in rows if r[key] == first]
    assert float(latency) == NEGATIVE_LATENCY and latency.startswith("-")  # a number, as is


# ---- promptlab export ----------------------------------------------------------------


@pytest.mark.parametrize("table", ["results", "items"])
def test_the_cli_export_quotes_every_formula_cell(
    hostile: tuple[Path, str, dict[str, str]], tmp_path: Path, table: str
) -> None:
    db, run_id, planted = hostile
    out = tmp_path / f"{table}.csv"
    cli(
        "--db",
        str(db),
        "export",
        "--table",
        table,
        "--format",
        "csv",
        "--run",
        run_id,
        "-o",
        str(out),
    )
    assert_neutralised(csv_rows(out.read_bytes()), planted)


def test_the_cli_export_with_raw_keeps_every_cell_exact(
    hostile: tuple[Path, str, dict[str, str]], tmp_path: Path
) -> None:
    db, run_id, planted = hostile
    out = tmp_path / "results.csv"
    cli("--db", str(db), "export", "--format", "csv", "--run", run_id, "--raw", "-o", str(out))
    rows = csv_rows(out.read_bytes())
    assert outputs(rows, planted) == planted


def test_the_cli_export_of_jsonl_and_parquet_is_unchanged(
    hostile: tuple[Path, str, dict[str, str]], tmp_path: Path
) -> None:
    db, run_id, planted = hostile
    jsonl, parquet = tmp_path / "r.jsonl", tmp_path / "r.parquet"
    cli("--db", str(db), "export", "--format", "jsonl", "--run", run_id, "-o", str(jsonl))
    cli("--db", str(db), "export", "--format", "parquet", "--run", run_id, "-o", str(parquet))
    lines = [json.loads(line) for line in jsonl.read_bytes().splitlines()]
    assert {
        r["idempotency_key"]: r["output_text"] for r in lines if r["idempotency_key"] in planted
    } == planted
    table = pq.read_table(parquet).to_pylist()
    assert {
        r["idempotency_key"]: r["output_text"] for r in table if r["idempotency_key"] in planted
    } == planted


def test_the_export_help_says_what_is_done_and_why_raw(tmp_path: Path) -> None:
    for command in (["export", "--help"], ["review", "export", "--help"]):
        text = " ".join(cli(*command).output.split())
        assert "--raw" in text and "spreadsheet" in text and "program" in text, text
        assert "leading '" in text, text


# ---- the computed tables and the app's downloads ---------------------------------------


def test_the_app_download_bytes_are_neutralised_and_jsonl_is_exact(
    hostile: tuple[Path, str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id, planted = hostile
    monkeypatch.setenv("PROMPTLAB_DB", str(db))
    with Workbench.open() as wb:
        assert_neutralised(
            csv_rows(wb.exports.table_bytes("results", "csv", run_id=run_id)), planted
        )
        jsonl = wb.exports.table_bytes("results", "jsonl", run_id=run_id)
    lines = [json.loads(line) for line in jsonl.decode().splitlines()]
    assert {
        r["idempotency_key"]: r["output_text"] for r in lines if r["idempotency_key"] in planted
    } == planted


def test_a_downloaded_comparison_quotes_formulas_and_keeps_negative_numbers(
    hostile: tuple[Path, str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id, _ = hostile
    monkeypatch.setenv("PROMPTLAB_DB", str(db))
    with Workbench.open() as wb:
        shown = wb.analysis.compare(run_id)
        rows = [
            dataclasses.replace(
                r, reason=HOSTILE[i % len(HOSTILE)], effect=-0.25, control="@SUM(A1)"
            )
            for i, r in enumerate(shown.rows)
        ]
        comparison = dataclasses.replace(shown, rows=rows)
        written = csv_rows(wb.exports.comparison_bytes(comparison, "csv"))
        jsonl = wb.exports.comparison_bytes(comparison, "jsonl")
    assert len(written) == len(rows) >= 2 and formula_cells(written) == []
    assert [r["reason"] for r in written] == ["'" + r.reason for r in rows]
    assert {r["control"] for r in written} == {"'@SUM(A1)"}
    assert {r["effect"] for r in written} == {"-0.25"}  # a number stays one
    exact = [json.loads(line) for line in jsonl.decode().splitlines()]
    assert [r["reason"] for r in exact] == [r.reason for r in rows]
    assert {r["effect"] for r in exact} == {-0.25}


def test_the_metrics_export_quotes_a_formula_variant_name(
    hostile: tuple[Path, str, dict[str, str]], tmp_path: Path
) -> None:
    db, run_id, _ = hostile
    con = duckdb.connect(str(db))
    try:
        (name,) = con.execute(
            "SELECT name FROM run_variants WHERE run_id = ? ORDER BY variant_index LIMIT 1",
            [run_id],
        ).fetchone() or ("",)
        con.execute(
            "UPDATE run_variants SET name = '=1+1' WHERE run_id = ? AND name = ?", [run_id, name]
        )
        con.execute(
            "UPDATE results SET variant = '=1+1' WHERE run_id = ? AND variant = ?", [run_id, name]
        )
    finally:
        con.close()
    out = tmp_path / "metrics.csv"
    cli(
        "--db",
        str(db),
        "export",
        "--table",
        "metrics",
        "--format",
        "csv",
        "--run",
        run_id,
        "-o",
        str(out),
    )
    rows = csv_rows(out.read_bytes())
    assert "'=1+1" in {r["variant"] for r in rows} and formula_cells(rows) == []


# ---- promptlab review export ---------------------------------------------------------


def settled_hostile_answers(db: Path, run_id: str) -> None:
    """Rows 0..6 of the run corrected to a formula each; their dataset rows hold a
    formula as a column name and as a cell, and a negative number. The workbench is
    the one PROMPTLAB_DB names (`db`)."""
    con = duckdb.connect(str(db))
    try:
        for row in range(len(HOSTILE)):
            values = {"=cmd|' /C calc'!A0": HOSTILE[row], "delta": -3}
            con.execute(
                "UPDATE run_rows SET row_values = ? WHERE run_id = ? AND row_index = ?",
                [json.dumps(values), run_id, row],
            )
    finally:
        con.close()
    with Workbench.open() as wb:
        ids = wb.review.add(run_id, list(range(len(HOSTILE))), "formulas")
        for item_id, answer in zip(ids, HOSTILE, strict=True):
            wb.review.correct(item_id, answer)


def test_the_review_export_quotes_formulas_and_raw_keeps_them(
    hostile: tuple[Path, str, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id, _ = hostile
    monkeypatch.setenv("PROMPTLAB_DB", str(db))
    settled_hostile_answers(db, run_id)
    safe, raw = tmp_path / "expected.csv", tmp_path / "raw.csv"
    cli("--db", str(db), "review", "export", str(safe), "--run", run_id)
    rows = csv_rows(safe.read_bytes())
    assert formula_cells(rows) == [] and len(rows) == len(HOSTILE)
    assert list(rows[0]) == ["'=cmd|' /C calc'!A0", "delta", "expected"]  # the header too
    assert [r["'=cmd|' /C calc'!A0"] for r in rows] == ["'" + h for h in HOSTILE]
    # A reviewer's answer is stripped when settled: a tab or CR before it goes.
    assert [r["expected"] for r in rows] == ["'" + h.strip() for h in HOSTILE]
    assert {r["delta"] for r in rows} == {"-3"}  # a number stays one

    cli("--db", str(db), "review", "export", str(raw), "--run", run_id, "--raw")
    exact = csv_rows(raw.read_bytes())
    assert [r["=cmd|' /C calc'!A0"] for r in exact] == list(HOSTILE)
    assert [r["expected"] for r in exact] == [h.strip() for h in HOSTILE]


# ---- the API ---------------------------------------------------------------------------


def test_the_api_export_quotes_formulas_unless_raw(
    hostile: tuple[Path, str, dict[str, str]],
) -> None:
    db, run_id, planted = hostile
    served = Served(db)
    try:
        path = f"/v1/exports/results?format=csv&run_id={quote(run_id)}"
        status, body, headers = get_raw(served, path)
        assert status == 200 and headers["content-type"].startswith("text/csv")
        assert_neutralised(csv_rows(body), planted)
        status, body, _ = get_raw(served, path + "&raw=true")
        assert status == 200 and outputs(csv_rows(body), planted) == planted
        status, body, _ = get_raw(served, f"/v1/exports/results?format=parquet&run_id={run_id}")
        table = pq.read_table(io.BytesIO(body)).to_pylist()
        assert {
            r["idempotency_key"]: r["output_text"] for r in table if r["idempotency_key"] in planted
        } == planted
    finally:
        served.stop()


# ---- the rule itself -------------------------------------------------------------------


def test_the_rule_is_the_same_in_python_and_in_duckdb() -> None:
    from promptlab.data.export import csv_cell, neutralised, sql_neutralised

    cells = [*HOSTILE, "", "plain", "a=1", "'=quoted already", "x\n=1", "\n=1", " =1", "ü"]
    con = duckdb.connect()
    try:
        for cell in cells:
            (in_sql,) = con.execute(f"SELECT {sql_neutralised('?')}", [cell]).fetchone() or (None,)
            assert in_sql == neutralised(cell), cell
            assert (in_sql != cell) == cell.startswith(FORMULA_STARTS), cell
        assert con.execute(f"SELECT {sql_neutralised('NULL')}").fetchone() == (None,)
    finally:
        con.close()
    assert [csv_cell(v) for v in (-3, -0.5, True, None, "-3", ["=x"])] == [
        -3,
        -0.5,
        True,
        None,
        "'-3",
        "['=x']",
    ]
