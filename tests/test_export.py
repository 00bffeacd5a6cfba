"""Exports through DuckDB's COPY: the rows shown, every format, filters, files, secrets."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main
from promptlab.data.export import TABLES, ExportFilters, file_name
from promptlab.errors import ExportError, PromptlabError
from promptlab.store import Store
from promptlab.workbench import Workbench
from tests.test_metrics import settings

READERS = {
    "parquet": "read_parquet",
    "csv": "read_csv",
    "jsonl": "read_json",
}


def read_back(path: Path, fmt: str = "parquet", order: str = "") -> list[dict[str, Any]]:
    """The file's rows as DuckDB reads them, as dicts."""
    with duckdb.connect() as con:
        cur = con.execute(f"SELECT * FROM {READERS[fmt]}(?){order}", [str(path)])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> Path:
    copy = tmp_path / "export.duckdb"
    shutil.copy(runs[0], copy)
    return copy


@pytest.fixture
def wb(db: Path) -> Iterator[Workbench]:
    with Store(db) as store, Workbench(store, settings(db)) as bench:
        yield bench


# ---- the rows shown ------------------------------------------------------------------


def test_a_parquet_export_of_items_holds_exactly_the_rows_the_items_table_shows(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    run_id = runs[1]
    out = tmp_path / "items.parquet"
    assert wb.exports.write_table("items", "parquet", out, run_id=run_id) == 40
    shown = wb.runs.items(run_id, limit=1000).rows
    got = read_back(out, order=" ORDER BY seq")  # rows come in no set order
    assert len(got) == len(shown) == 40
    for row, item in zip(got, shown, strict=True):
        assert (row["key"], row["run_id"], row["seq"], row["row_index"]) == (
            item.key,
            run_id,
            item.seq,
            item.row_index,
        )
        assert row["row_number"] == item.row_index + 1  # as the Runs page numbers it
        assert (row["variant"], row["repeat"], row["status"]) == (
            item.variant,
            item.repeat,
            str(item.status),
        )
        assert (row["error_kind"], row["attempts"], row["latency_ms"]) == (
            item.error_kind,
            item.attempts,
            item.latency_ms,
        )
        assert (row["finished_at"], row["check_status"]) == (item.finished_at, item.check_status)
        assert row["output_text"].startswith(item.output_preview or "")


def test_results_and_attempts_are_the_stored_rows(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    run_id = runs[1]
    for table, order in (("results", "run_id, seq"), ("attempts", "idempotency_key, attempt")):
        out = tmp_path / f"{table}.parquet"
        count = wb.exports.write_table(table, "parquet", out, run_id=run_id)
        with wb.store.read() as cur:
            stored = cur.execute(
                f"SELECT * FROM {table} WHERE run_id = ? ORDER BY {order}", [run_id]
            ).fetchall()
        with duckdb.connect() as con:
            got = con.execute(f"SELECT * FROM read_parquet(?) ORDER BY {order}", [str(out)])
            rows = got.fetchall()
            names = [d[0] for d in got.description]
        assert count == len(stored) == len(rows) >= 40
        if table == "results":  # beside row_index (from 0), the row as a page numbers it
            at = names.index("row_index")
            assert names[at + 1] == "row_number"
            assert all(r[at + 1] == r[at] + 1 for r in rows)
            rows = [r[: at + 1] + r[at + 2 :] for r in rows]
        # JSON columns come back as text, parsed they are equal.
        plain = [
            tuple(json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v for v in r)
            for r in rows
        ]
        expected = [
            tuple(json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v for v in r)
            for r in stored
        ]
        assert plain == expected


def test_the_metrics_export_is_the_metrics_table(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    out = tmp_path / "metrics.parquet"
    assert wb.exports.write_table("metrics", "parquet", out, run_id=runs[1]) == 2
    shown = wb.analysis.metrics(run_id=runs[1])
    got = read_back(out)
    for row, m in zip(got, shown, strict=True):
        assert (row["run_id"], row["variant"], row["prompt_version"]) == (
            m.run_id,
            m.variant,
            m.prompt_version,
        )
        assert (row["finished"], row["completed"], row["completion_rate"]) == (
            m.finished,
            m.completed,
            m.completion_rate,
        )
        assert (row["latency_p50_ms"], row["latency_p99_ms"], row["cost_usd"]) == (
            m.latency_p50_ms,
            m.latency_p99_ms,
            m.cost_usd,
        )
        assert json.loads(row["failed_by_kind"]) == dict(m.failed_by_kind)
        assert row["last_finished_at"] == m.last_finished_at
    across = tmp_path / "versions.csv"
    assert wb.exports.write_table("metrics", "csv", across, prompt="ticket-triage") == 2
    assert [r["prompt_version"] for r in read_back(across, "csv")] == ["1.1.0", "2.0.0"]


def test_the_comparisons_export_has_every_row_with_n_effect_interval_p_and_verdict(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    out = tmp_path / "comparisons.jsonl"
    comparison = wb.analysis.compare(runs[1])
    assert wb.exports.write_table("comparisons", "jsonl", out, run_id=runs[1]) == len(
        comparison.rows
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    for line, row in zip(lines, comparison.rows, strict=True):
        assert (line["variant"], line["metric"], line["verdict"]) == (
            row.variant,
            row.metric,
            str(row.verdict),
        )
        assert (line["n_control"], line["n_variant"], line["effect"]) == (
            row.n_control,
            row.n_variant,
            row.effect,
        )
        assert (line["p_value"], line["adjusted_p"]) == (row.p_value, row.adjusted_p)
        low = row.interval.low if row.interval else None
        assert line["interval_low"] == low
    both = tmp_path / "both.parquet"
    count = wb.exports.write_table("comparisons", "parquet", both, experiment="triage-split")
    assert count == 2 * len(comparison.rows)
    assert {r["run_id"] for r in read_back(both)} == {runs[1], runs[2]}


# ---- formats and filters -------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_each_format_reads_back_to_the_same_rows(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
    fmt: str,
) -> None:
    out = tmp_path / file_name("results", fmt, ExportFilters(run_id=runs[1]))
    assert out.suffix == {"csv": ".csv", "parquet": ".parquet", "jsonl": ".jsonl"}[fmt]
    assert wb.exports.write_table("results", fmt, out, run_id=runs[1]) == 40
    got = read_back(out, fmt, " ORDER BY seq")
    assert [r["seq"] for r in got] == list(range(40))
    assert {r["run_id"] for r in got} == {runs[1]}
    assert [r["status"] for r in got] == ["succeeded"] * 40
    if fmt == "jsonl":  # one JSON object per line, not an array
        lines = out.read_text().splitlines()
        assert len(lines) == 40 and all(json.loads(line)["run_id"] == runs[1] for line in lines)


def test_export_bytes_holds_what_the_file_holds(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    data = wb.exports.table_bytes("results", "csv", run_id=runs[1])
    out = tmp_path / "results.csv"
    wb.exports.write_table("results", "csv", out, run_id=runs[1])
    header, *rows = data.decode().splitlines()
    file_header, *file_rows = out.read_text().splitlines()
    assert (header, sorted(rows)) == (file_header, sorted(file_rows)) and len(rows) == 40
    assert not list(tmp_path.glob(".*.tmp"))


def test_filters_by_run_experiment_and_prompt(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    one = wb.exports.write_table("results", "parquet", tmp_path / "one.parquet", run_id=runs[2])
    both = wb.exports.write_table(
        "results", "parquet", tmp_path / "both.parquet", experiment="triage-split"
    )
    assert (one, both) == (80, 120)  # the all-mode run sends each row to both variants
    runs_seen = {r["run_id"] for r in read_back(tmp_path / "both.parquet")}
    assert runs_seen == {runs[1], runs[2]}
    staging = wb.prompts.resolve("ticket-triage@2.0.0").id
    with wb.store.read() as cur:
        cur.execute("UPDATE results SET prompt_version_id = 'other' WHERE variant = 'staging'")
    kept = wb.exports.write_table("results", "csv", tmp_path / "p.csv", prompt="ticket-triage")
    rows = read_back(tmp_path / "p.csv", "csv")
    assert kept == len(rows) and 0 < kept < 120
    assert staging not in {r["prompt_version_id"] for r in rows}
    items = wb.exports.write_table("items", "csv", tmp_path / "i.csv", prompt="ticket-triage")
    assert items == 120  # items follow their variant's pinned version, which did not move
    none = wb.exports.write_table(
        "results",
        "csv",
        tmp_path / "none.csv",
        run_id=runs[1],
        experiment="triage-split",
        prompt="ticket-triage",
    )
    assert none == sum(1 for r in rows if r["run_id"] == runs[1])


def test_unknown_names_and_filters_are_one_line_errors(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    out = tmp_path / "x.csv"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"table": "runs"}, "unknown table 'runs': one of items, results"),
        ({"fmt": "xlsx"}, "unknown format 'xlsx': one of csv, parquet, jsonl"),
        ({"run_id": "run_nope"}, "run_nope"),
        ({"prompt": "nope"}, "no prompt named 'nope'"),
        ({"experiment": "nope"}, "no experiment named 'nope'"),
        ({"table": "comparisons"}, "give --run or --experiment"),
        ({"table": "comparisons", "run_id": runs[1], "prompt": "x"}, "--prompt does not apply"),
    ]
    for given, expected in cases:
        table = given.pop("table", "results")
        fmt = given.pop("fmt", "csv")
        with pytest.raises(PromptlabError) as caught:
            wb.exports.write_table(table, fmt, out, **given)
        assert expected in str(caught.value) and "\n" not in str(caught.value)
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))
    assert set(TABLES) == {"items", "results", "attempts", "metrics", "comparisons", "feedback"}


def test_feedback_is_exported_by_run_and_prompt(
    wb: Workbench, runs: tuple[Path, str, str], tmp_path: Path
) -> None:
    run_id = runs[1]
    keys = [r.key for r in wb.runs.items(run_id, status="succeeded", limit=2).rows]
    wb.analysis.rate_result(run_id, keys[0], "thumbs_up")
    wb.analysis.rate_result(run_id, keys[1], "click")  # stored with its impression
    out = tmp_path / "feedback.jsonl"
    assert wb.exports.write_table("feedback", "jsonl", out, run_id=run_id) == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["kind"] for r in rows) == ["click", "impression", "thumbs_up"]
    assert {r["idempotency_key"] for r in rows} == set(keys)
    version = wb.runs.item(run_id, keys[0]).variant.prompt_ref.split("@")[0]
    assert wb.exports.write_table("feedback", "csv", tmp_path / "f.csv", prompt=version) == 3


# ---- files ---------------------------------------------------------------------------


def test_an_existing_file_is_kept_unless_forced_and_a_missing_folder_is_refused(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.csv"
    out.write_text("keep me\n")
    with pytest.raises(ExportError, match=r"r\.csv already exists; pass --force"):
        wb.exports.write_table("results", "csv", out, run_id=runs[1])
    assert out.read_text() == "keep me\n"
    assert wb.exports.write_table("results", "csv", out, run_id=runs[1], force=True) == 40
    assert out.read_text().startswith("idempotency_key,")
    with pytest.raises(ExportError, match="folder .*missing does not exist"):
        wb.exports.write_table("results", "csv", tmp_path / "missing" / "r.csv", run_id=runs[1])
    with pytest.raises(ExportError, match="is a folder; give a file name"):
        wb.exports.write_table("results", "csv", tmp_path, run_id=runs[1])
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.no_database  # the folder holds what the export left, and nothing else
def test_a_failed_copy_leaves_no_file(
    wb: Workbench,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.parquet"
    with pytest.raises(PromptlabError, match="no run with id 'run_missing'"):
        wb.exports.write_table("results", "parquet", out, run_id="run_missing")
    assert list(tmp_path.iterdir()) == [tmp_path / "export.duckdb"]


# ---- the CLI -------------------------------------------------------------------------


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_promptlab_export_writes_the_file_and_says_how_many_rows(
    db: Path,
    runs: tuple[Path, str, str],
    tmp_path: Path,
) -> None:
    out = tmp_path / "r.parquet"
    args = ["--db", str(db), "export", "--run", runs[1], "--table", "results"]
    result = cli(*args, "--format", "parquet", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote 40 rows to {out}\n"
    assert len(read_back(out)) == 40
    again = cli(*args, "--format", "parquet", "-o", str(out))
    assert again.exit_code == 1
    assert again.output == f"error: export: {out} already exists; pass --force to overwrite it\n"
    assert cli(*args, "--format", "parquet", "-o", str(out), "--force").exit_code == 0
    bad = cli(*args, "--format", "xml", "-o", str(out))
    assert bad.exit_code == 1 and "unknown format 'xml'" in bad.output
    metrics = cli(
        "--db",
        str(db),
        "export",
        "--table",
        "metrics",
        "--experiment",
        "triage-split",
        "--format",
        "csv",
        "-o",
        str(tmp_path / "m.csv"),
    )
    assert metrics.output == f"wrote 4 rows to {tmp_path / 'm.csv'}\n"


def test_without_o_the_file_is_named_after_what_it_holds(
    db: Path,
    runs: tuple[Path, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("--db", str(db), "export", "--prompt", "ticket-triage", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    assert result.output == "wrote 120 rows to results-prompt-ticket-triage.jsonl\n"
    assert (tmp_path / "results-prompt-ticket-triage.jsonl").exists()
