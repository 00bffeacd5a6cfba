"""Datasets: imported by DuckDB's readers in one transaction, refused with the place named."""

from __future__ import annotations

import os
import re
from pathlib import Path

import duckdb
import pytest

from promptlab.data.datasets import DatasetStore, check_rows
from promptlab.data.demo import load_demo_datasets, load_demo_prompts
from promptlab.errors import DatasetError, NotFoundError
from promptlab.prompts.registry import Registry
from promptlab.prompts.templates import Template
from promptlab.store import Store


@pytest.fixture
def datasets(store: Store) -> DatasetStore:
    return DatasetStore(store)


def write(folder: Path, name: str, content: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def stored(store: Store) -> tuple[int, int]:
    """(catalog rows, dataset rows) in the store."""
    with store.read() as cur:
        catalog = cur.execute("SELECT count(*) FROM datasets").fetchone()
        rows = cur.execute("SELECT count(*) FROM dataset_rows").fetchone()
    assert catalog is not None and rows is not None
    return int(catalog[0]), int(rows[0])


# ---- round trips -----------------------------------------------------------------------


def test_csv_round_trip_keeps_text_order_and_empty_cells(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        "tickets.csv",
        'id,ticket,tier\r\n1,"Charged twice, please refund",pro\r\n'
        '2,"Two\nlines",\r\n3,"He said ""hi""",free\r\n',
    )
    info = datasets.import_file(path, "tickets", unit_column="id", author="alice")
    assert (info.name, info.source, info.format, info.row_count) == (
        "tickets",
        "tickets.csv",
        "csv",
        3,
    )
    assert info.columns == (("id", "VARCHAR"), ("ticket", "VARCHAR"), ("tier", "VARCHAR"))
    assert (info.unit_column, info.author) == ("id", "alice")
    assert datasets.preview("tickets") == [
        {"id": "1", "ticket": "Charged twice, please refund", "tier": "pro"},
        {"id": "2", "ticket": "Two\nlines", "tier": ""},  # a blank cell is "", not null
        {"id": "3", "ticket": 'He said "hi"', "tier": "free"},
    ]
    assert datasets.get("tickets") == info
    assert [i.name for i in datasets.list()] == ["tickets"]


def test_csv_with_a_byte_order_mark_and_no_final_newline(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    path = write(tmp_path, "bom.csv", b"\xef\xbb\xbfa,b\n1,2")
    datasets.import_file(path, "bom", author="a")
    assert datasets.preview("bom") == [{"a": "1", "b": "2"}]


def test_jsonl_round_trip_keeps_values_and_types(datasets: DatasetStore, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "orders.ndjson",
        '{"id": 1, "customer": {"name": "Ann", "plan": "pro"}, "items": ["a", "b"]}\n'
        "\n"
        '{"id": 2, "customer": {"name": "Bo"}, "note": null, "total": 2.5}\n',
    )
    info = datasets.import_file(path, "orders", author="a")
    assert info.format == "jsonl" and info.row_count == 2
    assert info.column_names == ["id", "customer", "items", "note", "total"]
    types = dict(info.columns)
    assert types["id"] == "BIGINT" and types["items"] == "VARCHAR[]"
    assert types["customer"].startswith("STRUCT(")
    assert datasets.preview("orders") == [
        {"id": 1, "customer": {"name": "Ann", "plan": "pro"}, "items": ["a", "b"]},
        # keys a row does not have stay absent (a template default can apply)
        {"id": 2, "customer": {"name": "Bo"}, "note": None, "total": 2.5},
    ]


def test_jsonl_with_crlf_line_ends_blank_lines_and_commas_in_text(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    path = write(tmp_path, "crlf.jsonl", '{"a": "x,\\"y\\""}\r\n\r\n  \r\n{"a": "z"}\r\n')
    assert datasets.import_file(path, "crlf", author="a").row_count == 2
    assert datasets.preview("crlf") == [{"a": 'x,"y"'}, {"a": "z"}]


def test_jsonl_values_of_mixed_plain_types_are_kept_as_written(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    path = write(tmp_path, "ids.jsonl", '{"id": 7}\n{"id": "A-7"}\n')
    info = datasets.import_file(path, "ids", author="a")
    assert dict(info.columns)["id"] == "JSON"
    assert datasets.preview("ids") == [{"id": 7}, {"id": "A-7"}]


def test_parquet_round_trip(datasets: DatasetStore, tmp_path: Path) -> None:
    path = tmp_path / "events.parquet"
    duckdb.execute(
        "COPY (SELECT i AS n, 'event ' || i AS label, {'k': i} AS meta, [i, i + 1] AS pair "
        f"FROM range(3) r(i)) TO '{path}' (FORMAT parquet)"
    )
    info = datasets.import_file(path, "events", unit_column="label", author="a")
    assert info.format == "parquet" and info.row_count == 3
    assert info.columns == (
        ("n", "BIGINT"),
        ("label", "VARCHAR"),
        ("meta", "STRUCT(k BIGINT)"),
        ("pair", "BIGINT[]"),
    )
    assert datasets.preview("events", 2) == [
        {"n": 0, "label": "event 0", "meta": {"k": 0}, "pair": [0, 1]},
        {"n": 1, "label": "event 1", "meta": {"k": 1}, "pair": [1, 2]},
    ]


def test_format_can_be_given_for_any_suffix(datasets: DatasetStore, tmp_path: Path) -> None:
    path = write(tmp_path, "export.txt", "a\n1\n")
    assert datasets.import_file(path, "export", fmt="csv", author="a").row_count == 1


def test_a_file_name_with_glob_characters_reads_only_that_file(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    # DuckDB's readers expand globs: 'rows[12].csv' would also match rows1.csv, rows2.csv.
    write(tmp_path, "rows1.csv", "a\nfrom rows1\n")
    path = write(tmp_path, "rows[12].csv", "a\nmine\n")
    info = datasets.import_file(path, "rows", author="a")
    assert info.source == "rows[12].csv"
    assert datasets.preview("rows") == [{"a": "mine"}]


# ---- malformed files: the place named, nothing stored ----------------------------------

MALFORMED = [
    (
        "empty.csv",
        b"",
        "empty.csv: the file is empty",
    ),
    (
        "header.csv",
        b"a,b,c\n",
        "header.csv: a header row but no data rows",
    ),
    (
        "blank.csv",
        b"\n\na,b\n",
        "blank.csv: no header row naming the columns (the first line is blank)",
    ),
    (
        "blank.jsonl",
        b"\n  \n",
        "blank.jsonl: no rows (every line is blank)",
    ),
    (
        "latin.csv",
        b"a,b\n1,2\n3,caf\xe9\n",
        "latin.csv, line 3: not UTF-8 text",
    ),
    (
        "latinhead.csv",
        b"a,caf\xe9\n1,2\n",
        "latinhead.csv, line 1, byte 6: not UTF-8 text",
    ),
    (
        "latin.jsonl",
        b'{"a": 1}\n{"a": "caf\xe9"}\n',
        "latin.jsonl, line 2, byte 11: not UTF-8 text",
    ),
    (
        "nul.csv",
        b"a,b\n1,2\n3,x\x00y\n",
        "nul.csv, line 3, byte 4: a NUL byte",
    ),
    (
        "nul.jsonl",
        b'{"a": 1}\n{"a": "x\x00"}\n',
        "nul.jsonl, line 2, byte 9: a NUL byte",
    ),
    (
        "few.csv",
        b"a,b,c\n1,2,3\n4,5\n6,7,8\n",
        "few.csv, line 3: expected 3 fields, found 2",
    ),
    (
        "many.csv",
        b"a,b,c\n1,2,3\n4,5,6,7\n",
        "many.csv, line 3: expected 3 fields, found 4",
    ),
    (
        "quote.csv",
        b'a,b\n1,2\n3,"never closed\n5,6\n',
        "quote.csv, line 3: a quoted field is never closed",
    ),
    (
        "dup.csv",
        b"a,b,a\n1,2,3\n",
        "dup.csv, line 1: column 'a' is named twice",
    ),
    (
        "case.csv",
        b"name,Name\n1,2\n",
        "case.csv, line 1: column 'Name' is named twice (as 'name'; names are compared "
        "ignoring case)",
    ),
    (
        "noname.csv",
        b"a,,c\n1,2,3\n",
        "noname.csv, line 1: column 2 has no name",
    ),
    (
        "bad.jsonl",
        b'{"a": 1}\n{"a": 2\n{"a": 3}\n',
        "bad.jsonl, line 2: not valid JSON (Expecting ',' delimiter at the end of the line)",
    ),
    (
        "array.jsonl",
        b'{"a": 1}\n\n[1, 2]\n',
        "array.jsonl, line 3: expected a JSON object, found an array",
    ),
    (
        "number.jsonl",
        b'{"a": 1}\n5\n',
        "number.jsonl, line 2: expected a JSON object, found a number",
    ),
    (
        "twice.jsonl",
        b'{"a": 1}\n{"a": 2, "a": 3}\n',
        "twice.jsonl, line 2: key 'a' appears twice in one object",
    ),
    (
        "nokey.jsonl",
        b'{"": 1}\n',
        "nokey.jsonl, line 1: a key is empty; keys name the columns",
    ),
    (
        "comma.jsonl",
        b'{"a": 1}\n{"a": 1 "b": 2}\n',
        "comma.jsonl, line 2: not valid JSON (Expecting ',' delimiter at column 9)",
    ),
    (
        "mixed.jsonl",
        b'{"b": {"k": 1}}\n\n{"b": null}\n{"b": "text"}\n',
        "mixed.jsonl, line 4, column b: text where line 1 has an object; a column holds "
        "objects, arrays or plain values, not a mix",
    ),
    (
        "shape.jsonl",
        b'{"b": [1]}\n{"b": {"k": 1}}\n',
        "shape.jsonl, line 2, column b: an object where line 1 has an array; a column "
        "holds objects, arrays or plain values, not a mix",
    ),
    (
        "text.parquet",
        b"a,b\n1,2\n",
        "text.parquet: not a Parquet file",
    ),
]


@pytest.mark.parametrize(("name", "content", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_refused_with_its_place_and_nothing_is_stored(
    datasets: DatasetStore, store: Store, tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    path = write(tmp_path, name, content)
    with pytest.raises(DatasetError) as caught:
        datasets.import_file(path, "data", author="a")
    assert str(caught.value) == message
    assert stored(store) == (0, 0)


def test_an_unknown_unit_column_names_the_columns(
    datasets: DatasetStore, store: Store, tmp_path: Path
) -> None:
    path = write(tmp_path, "tickets.csv", "id,ticket\n1,hi\n")
    with pytest.raises(DatasetError) as caught:
        datasets.import_file(path, "tickets", unit_column="user", author="a")
    assert (
        str(caught.value) == "tickets.csv: unit column 'user' is not a column; columns: id, ticket"
    )
    assert stored(store) == (0, 0)


def test_a_folder_or_fifo_is_not_a_regular_file(datasets: DatasetStore, tmp_path: Path) -> None:
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(DatasetError, match=r"folder\.csv: not a regular file$"):
        datasets.import_file(tmp_path / "folder.csv", "x", author="a")
    os.mkfifo(tmp_path / "pipe.csv")
    with pytest.raises(DatasetError, match=r"pipe\.csv: not a regular file$"):
        datasets.import_file(tmp_path / "pipe.csv", "x", author="a")
    with pytest.raises(DatasetError, match=r"missing\.csv: No such file or directory$"):
        datasets.import_file(tmp_path / "missing.csv", "x", author="a")


def test_size_name_and_format_rules(datasets: DatasetStore, store: Store, tmp_path: Path) -> None:
    path = write(tmp_path, "big.csv", "a\n" + "x\n" * 100)
    with pytest.raises(DatasetError, match=r"^big\.csv: 202 bytes, more than the 100 a dataset"):
        datasets.import_file(path, "big", author="a", max_bytes=100)
    with pytest.raises(DatasetError, match=r"dataset name 'Big Data' is not allowed"):
        datasets.import_file(path, "Big Data", author="a")
    with pytest.raises(DatasetError, match=r"notes\.txt: cannot tell the format from the suffix"):
        datasets.import_file(write(tmp_path, "notes.txt", "a\n1\n"), "notes", author="a")
    with pytest.raises(DatasetError, match=r"format 'xlsx': expected one of csv, jsonl, parquet"):
        datasets.import_file(path, "big", fmt="xlsx", author="a")
    assert stored(store) == (0, 0)


# ---- replace, unit column, delete ----------------------------------------------------


def test_reimport_is_refused_unless_replace_and_a_failed_replace_keeps_the_old(
    datasets: DatasetStore, store: Store, tmp_path: Path
) -> None:
    first = write(tmp_path, "v1.csv", "a\none\ntwo\n")
    datasets.import_file(first, "data", unit_column="a", author="a")
    with pytest.raises(DatasetError, match="dataset 'data' already exists: import with replace"):
        datasets.import_file(first, "data", author="a")

    broken = write(tmp_path, "v2.csv", "a,b\n1,2\n3\n")
    with pytest.raises(DatasetError, match=r"v2\.csv, line 3: expected 2 fields, found 1"):
        datasets.import_file(broken, "data", replace=True, author="b")
    assert datasets.get("data").source == "v1.csv"
    assert datasets.preview("data") == [{"a": "one"}, {"a": "two"}]

    second = write(tmp_path, "v2.jsonl", '{"b": 3}\n')
    info = datasets.import_file(second, "data", replace=True, author="b")
    assert (info.source, info.row_count, info.unit_column, info.author) == (
        "v2.jsonl",
        1,
        None,
        "b",
    )
    assert datasets.preview("data") == [{"b": 3}]
    assert stored(store) == (1, 1)


def test_unit_column_and_delete(datasets: DatasetStore, store: Store, tmp_path: Path) -> None:
    datasets.import_file(write(tmp_path, "t.csv", "user,text\nu1,hi\n"), "t", author="a")
    assert datasets.set_unit_column("t", "user").unit_column == "user"
    with pytest.raises(
        DatasetError, match=r"^t: unit column 'nope' is not a column; columns: user, text$"
    ):
        datasets.set_unit_column("t", "nope")
    assert datasets.set_unit_column("t", None).unit_column is None
    datasets.delete("t")
    assert stored(store) == (0, 0)
    with pytest.raises(NotFoundError, match=r"no dataset named 't' \(no datasets yet\)"):
        datasets.get("t")


def test_unknown_names_list_the_known_ones(datasets: DatasetStore, tmp_path: Path) -> None:
    datasets.import_file(write(tmp_path, "a.csv", "x\n1\n"), "alpha", author="a")
    datasets.import_file(write(tmp_path, "b.csv", "x\n1\n"), "beta", author="a")
    with pytest.raises(NotFoundError, match=r"no dataset named 'gamma' \(known: alpha, beta\)"):
        datasets.iter_rows("gamma")  # refused at the call, before any row is read
    with pytest.raises(NotFoundError):
        datasets.delete("gamma")


# ---- many rows -----------------------------------------------------------------------


def test_fifty_thousand_rows_import_and_stream_back_in_file_order(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    count = 50_000
    path = tmp_path / "many.csv"
    with path.open("w", encoding="utf-8") as handle:
        handle.write("id,text\n")
        for i in range(1, count + 1):
            handle.write(f'{i},"row {i}, with a comma"\n')
    assert datasets.import_file(path, "many", author="a").row_count == count
    expected = 1
    for row in datasets.iter_rows("many", chunk=777):
        assert row == {"id": str(expected), "text": f"row {expected}, with a comma"}
        expected += 1
    assert expected == count + 1
    assert [r["id"] for r in datasets.iter_rows("many", limit=3)] == ["1", "2", "3"]


def test_a_bad_row_far_down_a_large_file_is_found_on_its_line(
    datasets: DatasetStore, store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "late.csv"
    with path.open("w", encoding="utf-8") as handle:
        handle.write("id,text\n")
        for i in range(1, 30_001):
            handle.write(f"{i},text\n" if i != 25_000 else f"{i}\n")
    with pytest.raises(DatasetError) as caught:
        datasets.import_file(path, "late", author="a")
    assert str(caught.value) == "late.csv, line 25001: expected 2 fields, found 1"
    assert stored(store) == (0, 0)


# ---- rows against a template -----------------------------------------------------------

TEMPLATE = Template.build(
    [{"role": "user", "content": "{{ ticket }} ({{ tier }}, {{ count }} seats)"}],
    variables={
        "ticket": {"type": "string", "maxLength": 20},
        "tier": {"type": "string", "enum": ["free", "pro"], "default": "free"},
        "count": {"type": "integer", "minimum": 1},
    },
)


def test_check_rows_names_row_column_and_problem(datasets: DatasetStore, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "rows.csv",
        "ticket,tier,count,extra\n"
        "fine,pro,3,ignored\n"
        "fine,gold,3,x\n"  # not in the enum
        "fine,free,many,x\n"  # not an integer once coerced
        + "x" * 30
        + ",pro,0,x\n",  # too long, and below the minimum
    )
    datasets.import_file(path, "rows", author="a")
    result = check_rows(datasets.iter_rows("rows"), TEMPLATE)
    assert (result.total, result.valid, result.bad) == (4, 1, 3)
    assert result.bad_rows == frozenset({2, 3, 4})
    assert [str(p) for p in result.problems] == [
        "row 2, column tier: 'gold' is not one of ['free', 'pro']",
        "row 3, column count: 'many' is not of type 'integer'",
        "row 4, column count: 0 is less than the minimum of 1",
        "row 4, column ticket: 30 characters, at most 20",
    ]


def test_check_rows_lists_the_first_problems_and_counts_every_bad_row() -> None:
    rows = ({"ticket": "t", "count": "1" if i % 3 else "no"} for i in range(1, 10_001))
    result = check_rows(rows, TEMPLATE, listed=5)
    assert result.total == 10_000
    assert len(result.bad_rows) == 3333 and result.valid == 6667
    assert [p.row_number for p in result.problems] == [3, 6, 9, 12, 15]
    assert {p.column for p in result.problems} == {"count"}


def test_check_rows_reports_a_missing_column_and_a_render_error() -> None:
    template = Template.build([{"role": "user", "content": "{{ user.name }}"}])
    result = check_rows([{"other": 1}, {"user": "text"}, {"user": {"name": "Ann"}}], template)
    assert result.bad_rows == frozenset({1, 2})
    assert [(p.row_number, p.column) for p in result.problems] == [(1, "user"), (2, "user")]
    assert re.search(r"'user' is a required property", result.problems[0].problem)


# ---- the demo dataset ------------------------------------------------------------------


def test_demo_tickets_import_once_with_a_unit_column_and_fit_the_triage_prompt(
    datasets: DatasetStore, registry: Registry
) -> None:
    info, customers = load_demo_datasets(datasets)
    assert (info.name, info.row_count, info.unit_column) == ("tickets", 40, "customer_id")
    assert (customers.name, customers.row_count) == ("customers", 800)
    assert load_demo_datasets(datasets) == []  # already there: left as it is
    load_demo_prompts(registry)
    for ref in ("ticket-triage@production", "ticket-triage@staging"):
        template = registry.resolve(ref).template
        assert check_rows(datasets.iter_rows("tickets"), template).bad == 0
        assert check_rows(datasets.iter_rows("customers"), template).bad == 0
    units = {row["customer_id"] for row in datasets.iter_rows("tickets")}
    assert 1 < len(units) < 40  # several tickets per customer: units group rows
