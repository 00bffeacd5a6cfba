"""Files say what they hold: row caps hold while reading, whatever a Parquet footer says;
column names are checked as the file writes them; an event time's offset is a real one."""

from __future__ import annotations

import struct
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from promptlab.cli import main
from promptlab.data.datasets import DatasetStore
from promptlab.data.demo import load_demo_prompts
from promptlab.data.feedback import FeedbackImporter
from promptlab.errors import DatasetError, FeedbackError
from promptlab.prompts.registry import Registry
from promptlab.store import Store

pytestmark = pytest.mark.timeout(60)

#: A cap small enough that a file over it is written in milliseconds.
CAP = 10


@pytest.fixture
def datasets(store: Store) -> DatasetStore:
    return DatasetStore(store)


@pytest.fixture
def importer(store: Store, registry: Registry) -> FeedbackImporter:
    load_demo_prompts(registry)  # ticket-triage@production, for log and feedback rows
    return FeedbackImporter(store, registry)


def stored(store: Store, table: str) -> int:
    with store.read() as cur:
        row = cur.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


# ---- a Parquet footer that lies ------------------------------------------------------
# The footer is a Thrift compact-protocol FileMetaData: field 1 version (i32), field 2
# the schema (a list of structs), field 3 num_rows (i64). Rewriting field 3 makes a
# real file whose footer states another row count; the row groups, which readers use
# to read the rows, are left as they are.

_I64 = 6
_STRUCT = 12


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip(data: bytes, pos: int, kind: int) -> int:
    """The position after one value of compact-protocol type `kind` at `pos`."""
    if kind in (1, 2):  # a bool field: its value is in the field header
        return pos
    if kind == 3:  # byte
        return pos + 1
    if kind in (4, 5, 6):  # i16, i32, i64: zigzag varints
        return _varint(data, pos)[1]
    if kind == 7:  # double
        return pos + 8
    if kind == 8:  # binary / string
        size, pos = _varint(data, pos)
        return pos + size
    if kind in (9, 10):  # list, set
        size, element = data[pos] >> 4, data[pos] & 0x0F
        pos += 1
        if size == 15:
            size, pos = _varint(data, pos)
        for _ in range(size):
            pos = pos + 1 if element in (1, 2) else _skip(data, pos, element)
        return pos
    if kind == _STRUCT:
        while header := data[pos]:
            pos += 1
            if header >> 4 == 0:  # a long-form field id follows
                pos = _varint(data, pos)[1]
            pos = _skip(data, pos, header & 0x0F)
        return pos + 1
    raise AssertionError(f"compact type {kind} is not in a Parquet footer")


def state_rows(path: Path, stated: int) -> None:
    """Make the footer of the Parquet file at `path` say it holds `stated` rows."""
    data = path.read_bytes()
    assert data[-4:] == b"PAR1"
    (length,) = struct.unpack("<I", data[-8:-4])
    start = len(data) - 8 - length
    footer = data[start:-8]
    pos = field = 0
    while True:
        header = footer[pos]
        assert header, "the footer has no num_rows"
        pos += 1
        field += header >> 4  # short form: a delta from the last field id
        if header >> 4 == 0:
            raw, pos = _varint(footer, pos)
            field = (raw >> 1) ^ -(raw & 1)
        if field == 3:
            assert header & 0x0F == _I64
            end = _varint(footer, pos)[1]
            footer = footer[:pos] + _encode_varint(stated << 1) + footer[end:]
            break
        pos = _skip(footer, pos, header & 0x0F)
    path.write_bytes(data[:start] + footer + struct.pack("<I", len(footer)) + b"PAR1")


def lying_parquet(path: Path, table: pa.Table, stated: int) -> Path:
    pq.write_table(table, path, row_group_size=7)  # several row groups, as large files have
    state_rows(path, stated)
    assert pq.ParquetFile(path).metadata.num_rows == stated
    with duckdb.connect() as con:  # the rows are all there to be read
        count = con.execute("SELECT count(*) FROM read_parquet(?)", [str(path)]).fetchone()
    assert count == (table.num_rows,)
    return path


def tickets(rows: int) -> pa.Table:
    return pa.table({"id": list(range(1, rows + 1)), "ticket": ["hi"] * rows})


def test_a_dataset_whose_footer_understates_its_rows_is_refused_while_reading(
    datasets: DatasetStore, store: Store, tmp_path: Path
) -> None:
    honest = tmp_path / "honest.parquet"
    pq.write_table(tickets(2), honest)
    datasets.import_file(honest, "tickets", author="a", max_rows=CAP)
    path = lying_parquet(tmp_path / "lie.parquet", tickets(5 * CAP), stated=3)
    for name, replace in (("new", False), ("tickets", True)):
        with pytest.raises(DatasetError) as caught:
            datasets.import_file(path, name, author="a", replace=replace, max_rows=CAP)
        assert str(caught.value) == f"lie.parquet: more than the {CAP} rows a dataset may have"
    # Nothing half-imported, and the dataset a refused --replace was for is whole.
    assert [d.name for d in datasets.list()] == ["tickets"]
    assert datasets.preview("tickets") == [{"id": 1, "ticket": "hi"}, {"id": 2, "ticket": "hi"}]
    assert stored(store, "dataset_rows") == 2


def test_a_file_of_exactly_the_cap_is_imported_whatever_its_footer_says(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    path = lying_parquet(tmp_path / "full.parquet", tickets(CAP), stated=1)
    info = datasets.import_file(path, "full", author="a", max_rows=CAP)
    assert info.row_count == CAP
    assert [r["id"] for r in datasets.iter_rows("full")] == list(range(1, CAP + 1))


def test_feedback_and_logs_stop_reading_at_the_cap_before_checking_any_row(
    importer: FeedbackImporter, store: Store, tmp_path: Path
) -> None:
    # Every row is bad: reading past the cap would refuse the file for its content.
    rows = 5 * CAP
    bad = pa.table(
        {"version": ["nope@1"] * rows, "unit_id": ["u1"] * rows, "kind": ["clik"] * rows}
    )
    path = lying_parquet(tmp_path / "fb.parquet", bad, stated=3)
    with pytest.raises(FeedbackError) as caught:
        importer.import_feedback(path, max_rows=CAP)
    assert str(caught.value) == f"fb.parquet: more than the {CAP} rows a feedback file may have"
    with pytest.raises(FeedbackError) as caught:
        importer.import_logs(path, max_rows=CAP)
    assert str(caught.value) == f"fb.parquet: more than the {CAP} rows a log file may have"
    assert stored(store, "feedback") == stored(store, "production_logs") == 0


# ---- column names as the file writes them --------------------------------------------

NAMES = [
    (
        "case",
        pa.table({"a": [1], "A": [2]}),
        ": column 'A' is named twice (as 'a'; names are compared ignoring case)",
    ),
    (
        "same",
        pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"]),
        ": column 'a' is named twice",
    ),
    ("empty", pa.table({"a": [1], "": [2]}), ": column 2 has no name"),
    ("blank", pa.table({" ": [1]}), ": column 1 has no name"),
    (
        "nested-case",
        pa.table({"a": [1], "b": [{"x": 1, "X": 2}]}),
        ", column b: field 'X' is named twice (as 'x'; names are compared ignoring case)",
    ),
    ("nested-empty", pa.table({"b": [{"x": 1, "": 2}]}), ", column b: field 2 has no name"),
    (
        "deeper",
        pa.table({"b": [{"c": {"y": 1, "Y": 2}}]}),
        ", column b.c: field 'Y' is named twice (as 'y'; names are compared ignoring case)",
    ),
]


@pytest.mark.parametrize(("case", "table", "message"), NAMES, ids=[n[0] for n in NAMES])
def test_parquet_columns_named_twice_or_not_at_all_are_refused(
    datasets: DatasetStore, store: Store, tmp_path: Path, case: str, table: pa.Table, message: str
) -> None:
    path = tmp_path / f"{case}.parquet"
    pq.write_table(table, path)
    with pytest.raises(DatasetError) as caught:
        datasets.import_file(path, "data", author="a")
    assert str(caught.value) == f"{case}.parquet{message}"
    assert stored(store, "datasets") == stored(store, "dataset_rows") == 0


def test_the_command_line_says_a_parquet_name_problem_in_one_line(
    db_path: Path, tmp_path: Path
) -> None:
    path = tmp_path / "twins.parquet"
    pq.write_table(pa.table({"Ticket": ["hi"], "ticket": ["ho"]}), path)
    args = ["--db", str(db_path), "dataset", "import", str(path), "--name", "twins"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.stderr == (
        "error: twins.parquet: column 'ticket' is named twice (as 'Ticket'; names are "
        "compared ignoring case)\n"
    )


def test_a_struct_of_distinct_fields_and_a_list_column_still_import(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"b": [{"x": 1, "y": {"z": 2}}], "tags": [["p", "q"]]}), path)
    datasets.import_file(path, "nested", author="a")
    assert datasets.preview("nested") == [{"b": {"x": 1, "y": {"z": 2}}, "tags": ["p", "q"]}]


def test_feedback_parquet_and_jsonl_columns_named_twice_by_case_are_refused(
    importer: FeedbackImporter, store: Store, tmp_path: Path
) -> None:
    parquet = tmp_path / "fb.parquet"
    version = ["ticket-triage@production"]
    table = pa.table({"version": version, "unit_id": ["u1"], "Kind": ["click"], "KIND": ["x"]})
    pq.write_table(table, parquet)
    with pytest.raises(FeedbackError) as caught:
        importer.import_feedback(parquet)
    assert str(caught.value) == (
        "fb.parquet: column 'KIND' is named twice (as 'Kind'; names are compared ignoring case)"
    )
    jsonl = tmp_path / "logs.jsonl"
    jsonl.write_text(
        '{"version": "ticket-triage@production", "unit_id": "u1"}\n'
        '{"version": "ticket-triage@production", "Unit_Id": "u2"}\n'
    )
    with pytest.raises(FeedbackError) as caught:
        importer.import_logs(jsonl)
    assert str(caught.value) == (
        "logs.jsonl, line 2: column 'Unit_Id' is named twice (as 'unit_id' on line 1; "
        "names are compared ignoring case)"
    )
    assert stored(store, "feedback") == stored(store, "production_logs") == 0


def test_a_dataset_key_named_twice_on_one_line_says_so(
    datasets: DatasetStore, tmp_path: Path
) -> None:
    path = tmp_path / "twins.jsonl"
    path.write_text('{"a": 1}\n{"b": 1, "B": 2}\n')
    with pytest.raises(DatasetError) as caught:
        datasets.import_file(path, "twins", author="a")
    assert str(caught.value) == (
        "twins.jsonl, line 2: column 'B' is named twice (as 'b' on the same line; names are "
        "compared ignoring case)"
    )


def test_a_feedback_line_with_a_key_twice_in_one_object_is_refused(
    importer: FeedbackImporter, store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "fb.jsonl"
    path.write_text(
        '{"version": "ticket-triage@production", "unit_id": "u1", "kind": "click"}\n\n'
        '{"version": "ticket-triage@production", "unit_id": "u1", "kind": "click", '
        '"kind": "nope"}\n'
    )
    with pytest.raises(FeedbackError) as caught:
        importer.import_feedback(path)
    assert str(caught.value) == "fb.jsonl, line 3: key 'kind' appears twice in one object"
    assert stored(store, "feedback") == 0


# ---- event times -----------------------------------------------------------------------

OFFSETS_REFUSED = ["+25:00", "-99:00", "+24:00", "-2400", "+05:60", "+99"]


@pytest.mark.parametrize("offset", OFFSETS_REFUSED)
def test_an_event_time_offset_beyond_a_day_is_refused_with_its_place(
    importer: FeedbackImporter, store: Store, tmp_path: Path, offset: str
) -> None:
    time = f"2026-01-01T00:00:00{offset}"
    feedback = tmp_path / "fb.csv"
    feedback.write_text(
        "version,unit_id,kind,event_time\n"
        "ticket-triage@production,u1,click,2026-01-01T00:00:00Z\n"
        f"ticket-triage@production,u2,click,{time}\n"
    )
    expected = f"row 2, column event_time: {time!r} has an offset outside -23:59 to +23:59"
    with pytest.raises(FeedbackError) as caught:
        importer.import_feedback(feedback)
    assert str(caught.value) == f"fb.csv, {expected}"
    logs = tmp_path / "logs.jsonl"
    logs.write_text(
        '{"version": "ticket-triage@production"}\n'
        f'{{"version": "ticket-triage@production", "at": "{time}"}}\n'
    )
    with pytest.raises(FeedbackError) as caught:
        importer.import_logs(logs, {"event_time": "at"})
    assert str(caught.value) == f"logs.jsonl, line 2, column at: {expected.split(': ', 1)[1]}"
    assert stored(store, "feedback") == stored(store, "production_logs") == 0


def test_event_times_with_real_offsets_are_stored_in_utc(
    importer: FeedbackImporter, store: Store, tmp_path: Path
) -> None:
    times = {
        "2026-01-01T12:00:00+14:00": "2025-12-31T22:00:00+00:00",
        "2026-01-01T12:00:00-12:00": "2026-01-02T00:00:00+00:00",
        "2026-01-01T12:00:00+23:59": "2025-12-31T12:01:00+00:00",
        "2026-01-01T12:00:00+0530": "2026-01-01T06:30:00+00:00",
        "2026-01-01T12:00:00-03": "2026-01-01T15:00:00+00:00",
        "2026-01-01T12:00:00Z": "2026-01-01T12:00:00+00:00",
    }
    path = tmp_path / "logs.csv"
    path.write_text(
        "version,unit_id,event_time\n"
        + "".join(f"ticket-triage@production,{i},{t}\n" for i, t in enumerate(times))
    )
    assert importer.import_logs(path) == len(times)
    with store.read() as cur:
        rows = cur.execute("SELECT unit_id, event_time FROM production_logs").fetchall()
    found = {int(unit): at.isoformat() for unit, at in rows}
    assert found == dict(enumerate(times.values()))


KEY = "sk-" + "a1B2c3D4" * 4  # shaped like an OpenAI key


@pytest.mark.parametrize("unit", [KEY, f"Bearer {KEY[3:]}", f"user api_key={KEY[3:]}"])
def test_a_unit_id_shaped_like_a_key_is_refused_and_never_stored(
    importer: FeedbackImporter, store: Store, tmp_path: Path, unit: str
) -> None:
    # A unit id is stored, exported and compared as written: one that holds a key would
    # carry it into every export, so the file is refused, naming the row, not the key.
    feedback = tmp_path / "fb.csv"
    feedback.write_text(
        "version,unit_id,kind\n"
        "ticket-triage@production,u1,click\n"
        f'ticket-triage@production,"{unit}",click\n'
    )
    with pytest.raises(FeedbackError) as caught:
        importer.import_feedback(feedback)
    expected = "row 2, column unit_id: looks like a key or token; refused so that none is stored"
    assert str(caught.value) == f"fb.csv, {expected}"
    logs = tmp_path / "logs.jsonl"
    logs.write_text(
        '{"version": "ticket-triage@production", "user": "u1"}\n'
        f'{{"version": "ticket-triage@production", "user": "{unit}"}}\n'
    )
    with pytest.raises(FeedbackError) as caught:
        importer.import_logs(logs, {"unit_id": "user"})
    assert str(caught.value) == f"logs.jsonl, line 2, column user: {expected.split(': ', 1)[1]}"
    assert KEY[3:] not in str(caught.value)
    assert stored(store, "feedback") == stored(store, "production_logs") == 0
