"""Datasets as managed objects: import a file once, then read its rows from the store.

A dataset is imported by DuckDB's own readers, never row by row through Python, in one
transaction with its catalog row: a file that is refused leaves nothing behind. What a
malformed file is, and how it is said (one line naming the file and the place), lives
here; the SQL lives in `promptlab.store.datasets`.

Values keep what the format says: CSV cells are text (an empty cell is ""), as a
template expects them, and `coerce_text_values` turns them into a variable's declared
type when rows are checked or run; JSON Lines objects are stored exactly as written;
Parquet values keep their column types. A JSON Lines column must hold one kind of value
(objects, arrays, or scalars, with nulls anywhere): a template that looks up
`{{ customer.plan }}` cannot work on a row where `customer` is text.
"""

from __future__ import annotations

import builtins
import contextlib
import csv
import json
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from promptlab.data.jsonl import MAX_JSON_DEPTH, NotJsonError, strict_loads
from promptlab.data.lines import LineLimits
from promptlab.errors import DatasetError, NotFoundError, TemplateError, VariableError
from promptlab.prompts.templates import Template, coerce_text_values
from promptlab.records import DatasetInfo, RowCheck, RowProblem, utcnow
from promptlab.store.connection import Store
from promptlab.store.datasets import JSON_MAX_LINE_BYTES, DatasetTables, DatasetWrites, Source

#: Like prompt names: lowercase letters, digits, '.', '-', '_'.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,79}$")
FORMATS = ("csv", "jsonl", "parquet")
SUFFIX_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
#: The largest file imported (1 GiB): a million-row CSV of support tickets is ~100 MB.
MAX_FILE_BYTES = 2**30
#: The most rows one Parquet file may bring. Text rows are bounded by the file size, but a
#: few kilobytes of Parquet can hold a hundred million rows (runs of one value compress
#: away), and the count in its footer is only what the file says: the cap holds while
#: the rows are read.
MAX_FILE_ROWS = 20_000_000
#: A CSV header row longer than this is not a header.
MAX_HEADER_BYTES = 2**20
MAX_COLUMNS = 1000
#: Where a row problem is not about one variable (a render error).
TEMPLATE_COLUMN = "(template)"
NUL = b"\0"
#: A dataset file read a line at a time in Python (a run spec's `dataset:` path, a
#: request file for `promptlab batch`): the bounds of an import.
DATASET_LINES = LineLimits(JSON_MAX_LINE_BYTES, MAX_FILE_BYTES, kind="a dataset file")

_GLOB_CHARACTERS = frozenset("*?[]{}")
#: (RE2) What may make a line JSON only to DuckDB's lenient parser: NaN or Infinity as
#: a value, an exponent of 100 or more (1e999 reads as inf), a 1,000-digit integer
#: (Python refuses past 4,300). A match inside a string is parsed and passes.
_LENIENT_JSON = (
    r"(?i)[\[:,]\s*[-+]?(nan|inf|infinity)\s*[\]},]"  # NaN, -Infinity, inf as a value
    r"|[0-9][eE]\+?0*[0-9]{3}|[0-9]{1000}"  # 1e999; digits past what Python converts
)
_CSV_LINE = re.compile(r"CSV Error on Line: (\d+)")
_CSV_COUNT = re.compile(r"Expected Number of Columns: (\d+) Found: (\d+)")
_JSON_KINDS = {
    "OBJECT": "an object",
    "ARRAY": "an array",
    "VARCHAR": "text",
    "BIGINT": "a number",
    "UBIGINT": "a number",
    "DOUBLE": "a number",
    "BOOLEAN": "true/false",
}


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise DatasetError(
            f"dataset name {name!r} is not allowed: use lowercase letters, digits, '.', '-' "
            "or '_' (starting with a letter or digit, at most 80 characters)"
        )
    return name


def format_of(path: Path, fmt: str | None = None) -> str:
    """The format asked for, or the one the file's suffix says."""
    if fmt is not None:
        fmt = fmt.strip().lower()
        if fmt == "ndjson":
            return "jsonl"
        if fmt not in FORMATS:
            raise DatasetError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
        return fmt
    found = SUFFIX_FORMATS.get(path.suffix.lower())
    if found is None:
        raise DatasetError(
            f"{path.name}: cannot tell the format from the suffix {path.suffix!r}: "
            "use .csv, .jsonl, .ndjson or .parquet, or give the format"
        )
    return found


class DatasetStore:
    """Import, list, read and change datasets in one store."""

    def __init__(self, store: Store) -> None:
        self.tables = DatasetTables(store)

    def import_file(
        self,
        path: str | Path,
        name: str,
        *,
        fmt: str | None = None,
        unit_column: str | None = None,
        replace: bool = False,
        author: str,
        max_bytes: int = MAX_FILE_BYTES,
        max_rows: int = MAX_FILE_ROWS,
    ) -> DatasetInfo:
        """Import `path` as dataset `name`; a refused file leaves nothing stored.

        An existing name is refused unless `replace`, which swaps the rows and the
        catalog row in the same transaction. `max_rows` caps a Parquet file's rows.
        """
        check_name(name)
        path = Path(path)
        fmt = format_of(path, fmt)
        where = path.name
        _check_file(path, where, max_bytes)
        csv_columns: tuple[str, ...] = ()
        if fmt == "csv":
            csv_columns = _csv_header(path, where)
            _refuse_nul_bytes(path, where)
        with _readable_by_duckdb(path) as duck_path:
            source = source_of(fmt, duck_path, csv_columns, max_rows)
            try:
                described = describe_file(self.tables, source, where)
            except duckdb.Error as exc:
                raise _translate(exc, source, path, where) from exc
            with self.tables.importing() as writes:
                if writes.exists(name):
                    if not replace:
                        raise DatasetError(
                            f"dataset {name!r} already exists: import with replace "
                            "(--replace) to replace it, or choose another name"
                        )
                    writes.delete(name)
                names = [c for c, _type in described]
                try:
                    count = writes.insert_rows(name, source, names)
                except duckdb.Error as exc:
                    raise _translate(exc, source, path, where) from exc
                check_row_count(count, source, where)
                if count == 0:
                    raise DatasetError(
                        f"{where}: a header row but no data rows"
                        if fmt == "csv"
                        else f"{where}: no rows"
                    )
                columns = (
                    _jsonl_columns(writes, name, described, path, where)
                    if fmt == "jsonl"
                    else tuple(described)
                )
                info = DatasetInfo(
                    name=name,
                    source=where,
                    format=fmt,
                    row_count=count,
                    columns=columns,
                    unit_column=_checked_unit(unit_column, [c for c, _ in columns], where),
                    imported_at=utcnow(),
                    author=author,
                )
                writes.insert_info(info)
        return info

    def list(self) -> list[DatasetInfo]:
        return self.tables.infos()

    def get(self, name: str) -> DatasetInfo:
        info = self.tables.info(name)
        if info is None:
            known = self.tables.names()
            listed = f"known: {', '.join(known)}" if known else "no datasets yet"
            raise NotFoundError(f"no dataset named {name!r} ({listed})")
        return info

    def preview(self, name: str, limit: int = 20) -> builtins.list[dict[str, Any]]:
        """The first `limit` rows, as stored."""
        return list(self.iter_rows(name, limit))

    def iter_rows(
        self, name: str, limit: int | None = None, chunk: int = 5000
    ) -> Iterator[dict[str, Any]]:
        """Every row in row order (row 1 first), `chunk` rows in memory at a time."""
        self.get(name)  # an unknown name fails here, not at the first row
        return (json.loads(text) for text in self.tables.rows(name, limit, chunk))

    def first_row_without(self, name: str, column: str, limit: int | None = None) -> int | None:
        """The first row (from 1) with no value in `column`, read in DuckDB; None if none."""
        self.get(name)
        return self.tables.first_row_without(name, column, limit)

    def set_unit_column(self, name: str, column: str | None) -> DatasetInfo:
        """Name the column that identifies a unit (None: no unit column)."""
        info = self.get(name)
        self.tables.set_unit_column(name, _checked_unit(column, info.column_names, name))
        return self.get(name)

    def delete(self, name: str) -> None:
        self.get(name)
        self.tables.delete(name)


# ---- checking rows against a template ------------------------------------------------


def row_problems(template: Template, row_number: int, row: dict[str, Any]) -> list[RowProblem]:
    """What stops `row` from rendering, the way a run renders it (text cells coerced to
    the declared types first); empty when it renders."""
    try:
        template.render(coerce_text_values(template, row))
    except VariableError as exc:
        return [RowProblem(row_number, p.variable, p.message) for p in exc.problems]
    except TemplateError as exc:
        return [RowProblem(row_number, TEMPLATE_COLUMN, str(exc))]
    return []


def check_rows(
    rows: Iterable[dict[str, Any]], template: Template, *, listed: int = 100
) -> RowCheck:
    """Check each row (numbered from 1) against `template`; streams any number of rows.

    Lists the first `listed` problems and keeps every bad row's number.
    """
    total = 0
    problems: list[RowProblem] = []
    bad: set[int] = set()
    for number, row in enumerate(rows, start=1):
        total = number
        found = row_problems(template, number, row)
        if found:
            bad.add(number)
            problems.extend(found[: max(0, listed - len(problems))])
    return RowCheck(total=total, valid=total - len(bad), problems=problems, bad_rows=frozenset(bad))


# ---- checking a file -----------------------------------------------------------------


def source_of(fmt: str, duck_path: str, csv_columns: tuple[str, ...], max_rows: int) -> Source:
    """How to read a file: a Parquet file's rows up to `max_rows` (a text file's rows
    are bounded by its size)."""
    return Source(fmt, duck_path, csv_columns, max_rows if fmt == "parquet" else None)


def describe_file(
    tables: DatasetTables, source: Source, where: str, what: str = "a dataset"
) -> list[tuple[str, str]]:
    """(column, DuckDB type) of a file, after what is refused before any row is read: a
    Parquet column named twice or not at all, or a footer stating more rows than the cap.
    Raises duckdb.Error for a file DuckDB cannot read."""
    described = tables.describe(source)
    if source.format == "jsonl":
        _refuse_lenient_json(tables, source, where)
    if source.format == "parquet":
        _refuse_bad_parquet_names(tables.parquet_fields(source), where)
        stated = tables.stated_rows(source)
        if source.max_rows is not None and stated is not None and stated > source.max_rows:
            raise DatasetError(
                f"{where}: {stated:,} rows, more than the {source.max_rows:,} {what} may have"
            )
    return described


def check_row_count(count: int, source: Source, where: str, what: str = "a dataset") -> None:
    """Refuse a file that brought more rows than its cap (it is read up to one more)."""
    if source.max_rows is not None and count > source.max_rows:
        raise DatasetError(f"{where}: more than the {source.max_rows:,} rows {what} may have")


def _check_file(path: Path, where: str, max_bytes: int, what: str = "a dataset") -> None:
    try:
        info = path.stat()
    except OSError as exc:
        raise DatasetError(f"{path}: {exc.strerror or exc}") from exc
    # A FIFO or a device would block the read forever (or never end): files only.
    if not stat.S_ISREG(info.st_mode):
        raise DatasetError(f"{path}: not a regular file")
    if info.st_size == 0:
        raise DatasetError(f"{where}: the file is empty")
    if info.st_size > max_bytes:
        raise DatasetError(
            f"{where}: {info.st_size:,} bytes, more than the {max_bytes:,} {what} may have"
        )


@contextlib.contextmanager
def _readable_by_duckdb(path: Path) -> Iterator[str]:
    """A path DuckDB reads as this one file: its readers expand glob characters, so a
    file named `a[1].csv` is read through a link with a plain name."""
    resolved = str(path.resolve())
    if not _GLOB_CHARACTERS & set(resolved):
        yield resolved
        return
    with tempfile.TemporaryDirectory(prefix="promptlab-dataset-") as folder:
        link = Path(folder) / "dataset"
        link.symlink_to(resolved)
        yield str(link)


def _csv_header(path: Path, where: str) -> tuple[str, ...]:
    """The column names of the header row, checked: present, UTF-8, named, each once."""
    with path.open("rb") as handle:
        head = handle.read(MAX_HEADER_BYTES + 1)
    head = head.removeprefix(b"\xef\xbb\xbf")
    end = _record_end(head)
    if end is None:
        if len(head) > MAX_HEADER_BYTES:
            raise DatasetError(
                f"{where}, line 1: a header row longer than {MAX_HEADER_BYTES:,} bytes"
            )
        end = len(head)
    raw = head[:end].rstrip(b"\r")
    if not raw.strip():
        raise DatasetError(f"{where}: no header row naming the columns (the first line is blank)")
    if NUL in raw:
        raise DatasetError(f"{where}, line 1, byte {raw.index(NUL) + 1}: a NUL byte")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}, line 1, byte {exc.start + 1}: not UTF-8 text") from exc
    try:
        names = next(csv.reader([text], strict=True))
    except csv.Error as exc:
        raise DatasetError(f"{where}, line 1: not a valid CSV header ({exc})") from exc
    if len(names) > MAX_COLUMNS:
        raise DatasetError(f"{where}, line 1: {len(names)} columns, more than {MAX_COLUMNS}")
    for index, column in enumerate(names, start=1):
        if not column.strip():
            raise DatasetError(f"{where}, line 1: column {index} has no name")
    _refuse_case_twins(names, f"{where}, line 1")
    return tuple(names)


def _record_end(head: bytes) -> int | None:
    """Where the first CSV record ends (its newline), quotes respected; None if not here."""
    quoted = False
    for index, byte in enumerate(head):
        if byte == 0x22:  # '"': a doubled quote toggles twice, so it changes nothing
            quoted = not quoted
        elif byte == 0x0A and not quoted:
            return index
    return None


def _refuse_case_twins(
    names: list[str] | tuple[str, ...], where: str, what: str = "column"
) -> None:
    # DuckDB compares column names ignoring case: "Ticket" and "ticket" are one column.
    seen: dict[str, str] = {}
    for name in names:
        twin = seen.get(name.lower())
        if twin is not None:
            also = "" if twin == name else f" (as {twin!r}; names are compared ignoring case)"
            raise DatasetError(f"{where}: {what} {name!r} is named twice{also}")
        seen[name.lower()] = name


@dataclass
class _Group:
    """A Parquet group (the root or a struct) met while walking a schema."""

    place: str  # how a message names it: "x.parquet" or "x.parquet, column b.c"
    what: str  # what its children are called: "column" or "field"
    path: str  # "" for the root, "b.c" for field c of column b
    size: int  # how many children it has
    names: list[str] = field(default_factory=list)


def _refuse_bad_parquet_names(schema: list[tuple[str, int]], where: str) -> None:
    """Refuse a Parquet column or struct field with no name, or two of one group whose
    names differ only by case: DuckDB would rename them (`C2`, `A_1`), and the rows
    would not say what the file does. `schema` is (name, children) depth first from the
    root, walked without recursion (a hostile file may nest deep)."""
    if not schema:
        return
    groups = [_Group(where, "column", "", schema[0][1])]
    for name, children in schema[1:]:
        if not groups:
            return
        group = groups[-1]
        group.names.append(name)
        if not name.strip():
            raise DatasetError(f"{group.place}: {group.what} {len(group.names)} has no name")
        if children:
            path = f"{group.path}.{name}" if group.path else name
            groups.append(_Group(f"{where}, column {path}", "field", path, children))
            continue
        while groups and len(groups[-1].names) >= groups[-1].size:
            done = groups.pop()
            _refuse_case_twins(done.names, done.place, done.what)


def _refuse_nul_bytes(path: Path, where: str) -> None:
    """A NUL byte is binary, not text; DuckDB's CSV reader would keep it in a cell."""
    line, line_start, offset = 1, 0, 0
    with path.open("rb") as handle:
        while chunk := handle.read(2**20):
            found = chunk.find(b"\0")
            seen = chunk if found < 0 else chunk[:found]
            line += seen.count(b"\n")
            last = seen.rfind(b"\n")
            if last >= 0:
                line_start = offset + last + 1
            if found >= 0:
                byte = offset + found - line_start + 1
                raise DatasetError(f"{where}, line {line}, byte {byte}: a NUL byte")
            offset += len(chunk)


def _checked_unit(column: str | None, columns: list[str], where: str) -> str | None:
    if column is None or column in columns:
        return column
    raise DatasetError(
        f"{where}: unit column {column!r} is not a column; columns: {', '.join(columns)}"
    )


def _jsonl_columns(
    writes: DatasetWrites,
    name: str,
    described: list[tuple[str, str]],
    path: Path,
    where: str,
) -> tuple[tuple[str, str], ...]:
    """Keys in order of first appearance, with DuckDB's type; one kind of value each."""
    keys = writes.keys_in_order(name)
    check_jsonl_keys(writes.first_duplicate_key(name), keys, path, where)
    # A key that is null on every line: DuckDB's type for it is spelled '"NULL"'.
    types = {key: kind.strip('"') for key, kind in described}
    columns = tuple((key, types.get(key, "JSON")) for key, _row in keys)
    for column, kind in columns:
        if kind != "JSON":  # DuckDB settled on one type: no mix to report
            continue
        change = writes.first_kind_change(name, column)
        if change is not None:
            row, found, first_row, first = change
            raise DatasetError(
                f"{where}, line {_line_of_row(path, row)}, column {column}: "
                f"{_JSON_KINDS.get(found, found.lower())} where line "
                f"{_line_of_row(path, first_row)} has {_JSON_KINDS.get(first, first.lower())}; "
                "a column holds objects, arrays or plain values, not a mix"
            )
    return columns


def check_jsonl_keys(
    duplicate: tuple[int, str] | None, keys: list[tuple[str, int]], path: Path, where: str
) -> None:
    """Refuse a key twice in one object, or two keys that differ only by case (DuckDB
    reads them as one column): `duplicate` is the first (row, key) of the first kind,
    `keys` every key with the row it first appears in."""
    if duplicate is not None:
        row, key = duplicate
        raise DatasetError(
            f"{where}, line {_line_of_row(path, row)}: key {key!r} appears twice in one object"
        )
    seen: dict[str, tuple[str, int]] = {}
    for key, first_row in keys:
        twin = seen.get(key.lower())
        if twin is not None:
            twin_key, twin_row = twin
            on = (
                "the same line" if twin_row == first_row else f"line {_line_of_row(path, twin_row)}"
            )
            raise DatasetError(
                f"{where}, line {_line_of_row(path, first_row)}: column {key!r} is named twice "
                f"(as {twin_key!r} on {on}; names are compared ignoring case)"
            )
        seen[key.lower()] = (key, first_row)


def _line_of_row(path: Path, row: int) -> int:
    """The line of the `row`-th object of a JSON Lines file (blank lines are skipped)."""
    seen = 0
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                seen += 1
                if seen == row:
                    return number
    return row


# ---- DuckDB's errors, said in one line -----------------------------------------------


def _translate(exc: duckdb.Error, source: Source, path: Path, where: str) -> DatasetError:
    text = str(exc).replace(source.path, where)
    if source.format == "csv":
        return DatasetError(_csv_problem(text, where))
    if source.format == "jsonl":
        located = _locate_jsonl_problem(path)
        if located is not None:
            return DatasetError(f"{where}{located}")
        if "non-record JSON" in text:
            return DatasetError(f"{where}: expected JSON objects whose keys name the columns")
    if source.format == "parquet" and ("magic bytes" in text or "too small to be" in text):
        return DatasetError(f"{where}: not a Parquet file")
    return DatasetError(f"{where}: {_first_line(text)}")


def _csv_problem(text: str, where: str) -> str:
    line = _CSV_LINE.search(text)
    place = f"{where}, line {line[1]}" if line else where
    count = _CSV_COUNT.search(text)
    if count:
        return f"{place}: expected {count[1]} fields, found {count[2]}"
    if "unterminated quote" in text:
        return f"{place}: a quoted field is never closed"
    if "utf-8" in text.lower() or "unicode" in text.lower():
        return f"{place}: not UTF-8 text"
    if line:
        # The reason is on the line after "Original Line: ...".
        lines = text.splitlines()
        reason = lines[2] if len(lines) > 2 and lines[2].strip() else _first_line(text)
        return f"{place}: {reason.strip()}"
    return f"{place}: {_first_line(text)}"


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _locate_jsonl_problem(path: Path) -> str | None:
    """The first line DuckDB would refuse, read one line at a time, said as ", line N: why".

    Only run when DuckDB refused the file: its "Malformed JSON" messages count lines
    from the wrong place (one too many, blank lines left out), and some name none.
    """
    nonblank = 0
    with path.open("rb") as handle:
        number = 0
        while line := handle.readline(JSON_MAX_LINE_BYTES + 1):
            number += 1
            if len(line) > JSON_MAX_LINE_BYTES:
                return f", line {number}: longer than {JSON_MAX_LINE_BYTES:,} bytes"
            if NUL in line:
                return f", line {number}, byte {line.index(NUL) + 1}: a NUL byte"
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f", line {number}, byte {exc.start + 1}: not UTF-8 text"
            if not text.strip():
                continue
            nonblank += 1
            text = text.rstrip("\r\n")
            try:
                value = strict_loads(text, object_pairs_hook=_no_duplicates)
            except _DuplicateKey as dup:
                return f", line {number}: key {dup.key!r} appears twice in one object"
            except (json.JSONDecodeError, NotJsonError) as exc:
                return f", line {number}: {_json_problem(exc, text)}"
            if not isinstance(value, dict):
                return f", line {number}: expected a JSON object, found {_json_kind(value)}"
            if any(not key.strip() for key in value):
                return f", line {number}: a key is empty; keys name the columns"
    if nonblank == 0:
        return ": no rows (every line is blank)"
    return None


def _refuse_lenient_json(tables: DatasetTables, source: Source, where: str) -> None:
    """Refuse a JSON Lines file with a line DuckDB reads but JSON does not allow: NaN or
    Infinity (in any case), a number too large for a float, or nesting deeper than
    MAX_JSON_DEPTH (DuckDB's own limit is 128). DuckDB finds the few lines that could be
    one in a scan of the file and Python parses those; if one is, the file is read
    line by line to name the first."""
    for line in tables.json_lines_matching(source, _LENIENT_JSON, MAX_JSON_DEPTH):
        text = line.rstrip("\r")
        try:
            strict_loads(text)
        except (json.JSONDecodeError, NotJsonError) as exc:
            located = _locate_jsonl_problem(Path(source.path))
            raise DatasetError(f"{where}{located or ': ' + _json_problem(exc, text)}") from exc


def _json_problem(exc: json.JSONDecodeError | NotJsonError, text: str) -> str:
    if isinstance(exc, NotJsonError):
        return exc.reason
    at = "the end of the line" if exc.pos >= len(text) else f"column {exc.pos + 1}"
    return f"not valid JSON ({exc.msg} at {at})"


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "text"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return "a number"


def _first_line(text: str) -> str:
    text = re.sub(r"^[A-Za-z ]+ Error: ", "", text.strip())
    return text.splitlines()[0] if text else "unknown error"
