"""DuckDB's file readers: the SQL that reads a CSV, JSON Lines or Parquet file, and the
one place DuckDB's refusal of a file becomes a promptlab error.

Datasets, feedback and production logs are all read through here, so no row passes
through Python on the way in and no DuckDB exception leaves the store: a file DuckDB
cannot read raises `FileReadError`, one line naming the file and, when DuckDB says, the
line. The rules (what a malformed file is) stay in `promptlab.data.readers`.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from promptlab.errors import FileReadError
from promptlab.store.connection import Store


@dataclass(frozen=True)
class Source:
    """A file to import and how to read it.

    `path` must name one local file with no glob characters (DuckDB's readers expand
    `*`, `?` and `[...]`; `file_source` makes such a path); `csv_columns` are the names
    of the CSV header row; `name` is how messages call the file.
    """

    format: str  # "csv", "jsonl" or "parquet"
    path: str
    csv_columns: tuple[str, ...] = ()
    #: Read at most this many rows and one more (None: every row), so that a file over
    #: its cap is seen to be without being read whole, whatever its metadata says.
    max_rows: int | None = None
    name: str = ""

    @property
    def where(self) -> str:
        return self.name or self.path


_GLOB_CHARACTERS = frozenset("*?[]{}")


@contextmanager
def file_source(
    fmt: str, path: Path, csv_columns: tuple[str, ...] = (), max_rows: int | None = None
) -> Iterator[Source]:
    """How to read `path`, named by its file name in messages: a Parquet file's rows up
    to `max_rows` (a text file's rows are bounded by its size).

    DuckDB's readers expand glob characters, so a file named `a[1].csv` is read through
    a link with a plain name, which lasts as long as this context.
    """
    resolved = str(path.resolve())
    capped = max_rows if fmt == "parquet" else None
    if not _GLOB_CHARACTERS & set(resolved):
        yield Source(fmt, resolved, csv_columns, capped, path.name)
        return
    with tempfile.TemporaryDirectory(prefix="promptlab-dataset-") as folder:
        link = Path(folder) / "dataset"
        link.symlink_to(resolved)
        yield Source(fmt, str(link), csv_columns, capped, path.name)


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


#: DuckDB's CSV read buffer. Its default (32 MB, 16 x the 2 MB line limit) is one block
#: the store's working memory (64 MB) could not hold next to the rows being inserted: a
#: million-row import failed with "could not allocate block of size 30.5 MiB".
CSV_BUFFER_BYTES = 8 * 2**20


def _csv_reader() -> str:
    # The dialect is fixed (RFC 4180): DuckDB's sniffer guesses another delimiter for a
    # file with a short row, and then reads it as one column instead of refusing it.
    return (
        "read_csv(?, columns = ?, auto_detect = false, header = true, delim = ',', "
        "quote = '\"', escape = '\"', strict_mode = true, encoding = 'utf-8', "
        f"buffer_size = {CSV_BUFFER_BYTES})"
    )


#: The longest JSON Lines line read (DuckDB's `maximum_object_size` is 16 MB).
JSON_MAX_LINE_BYTES = 4 * 2**20


def _json_reader() -> str:
    # sample_size = -1: types are inferred from every row, so a row's place in the file
    # never changes what type its column gets. Only DESCRIBE uses this reader (DuckDB
    # reads the file once at bind time, within the store's memory).
    return (
        "read_json(?, format = 'newline_delimited', records = true, sample_size = -1, "
        f"maximum_object_size = {JSON_MAX_LINE_BYTES})"
    )


def _json_lines_reader() -> str:
    # The rows are read as lines of text and parsed by json(): DuckDB's JSON readers hold
    # a 32 MB buffer per thread whatever their options, more than the store's working
    # memory (64 MB) on two threads, so a million-line import ran out of memory. A byte
    # 0x01 never occurs in valid JSON (control characters must be escaped), so as the
    # delimiter it keeps each line one value; an invalid line fails in json().
    return (
        "read_csv(?, columns = {'line': 'VARCHAR'}, header = false, auto_detect = false, "
        "delim = chr(1), quote = '', escape = '', strict_mode = false, encoding = 'utf-8', "
        f"max_line_size = {JSON_MAX_LINE_BYTES}, buffer_size = {CSV_BUFFER_BYTES})"
    )


def select_rows(source: Source, columns: Sequence[str]) -> tuple[str, list[Any]]:
    """SQL for (row_number, row_values JSON) of every row of `source`, in file order.

    `row_number() OVER ()` numbers rows as the reader yields them; DuckDB keeps file
    order (preserve_insertion_order), which tests/test_datasets.py checks at 50,000 rows.
    """
    if source.format == "csv":
        # Cells are text: an empty cell is '' (as Python's csv module reads it), not null.
        fields = ", ".join(
            f"{quote_identifier(c)} := coalesce({quote_identifier(c)}, '')" for c in columns
        )
        reader = _capped(_csv_reader(), source)
        params: list[Any] = [source.path, {c: "VARCHAR" for c in columns}]
        return (
            f"SELECT row_number() OVER (), to_json(struct_pack({fields})) FROM {reader}",
            params,
        )
    if source.format == "jsonl":
        # Each object as written: no keys added for other rows' columns, numbers untouched;
        # json() writes it as strict JSON (DuckDB's parser lets a trailing comma pass).
        # Blank lines are no rows (with CRLF line ends they read as null).
        return (
            "SELECT row_number() OVER (), CASE WHEN json_type(line) = 'OBJECT' "
            f"THEN json(line) ELSE error('not a JSON object') END FROM {_json_lines(source)}",
            [source.path],
        )
    fields = ", ".join(f"{quote_identifier(c)} := {quote_identifier(c)}" for c in columns)
    reader = _capped("read_parquet(?)", source)
    return (
        f"SELECT row_number() OVER (), to_json(struct_pack({fields})) FROM {reader}",
        [source.path],
    )


def _json_lines(source: Source) -> str:
    """`FROM` text for the non-blank lines of a JSON Lines file (its rows)."""
    return _capped(f"{_json_lines_reader()} WHERE trim(line) <> ''", source)


def _capped(rows: str, source: Source) -> str:
    """`FROM` text for the rows of `rows` (a reader, maybe with a WHERE), at most
    `source.max_rows` + 1 of them: the LIMIT sits right on the reader, so the scan ends
    there (a 30-million-row file capped at 10 is refused in milliseconds)."""
    if source.max_rows is None:
        return f"(SELECT * FROM {rows})"
    return f"(SELECT * FROM {rows} LIMIT {int(source.max_rows) + 1})"


def keys_in_order(
    tx: duckdb.DuckDBPyConnection, rows: str, params: Sequence[Any] = ()
) -> list[tuple[str, int]]:
    """Every top-level key of `rows` (a query of row_number, row_values JSON) with the row
    it first appears in, ordered by first appearance (row, then place in the object)."""
    found = tx.execute(
        f"""
        SELECT key, min(row_number) AS first_row
        FROM (
            SELECT row_number, unnest(json_keys(row_values)) AS key,
                   unnest(range(len(json_keys(row_values)))) AS place
            FROM ({rows})
        )
        GROUP BY key
        ORDER BY min([row_number, place])
        """,
        list(params),
    ).fetchall()
    return [(str(r[0]), int(r[1])) for r in found]


def first_duplicate_key(
    tx: duckdb.DuckDBPyConnection, rows: str, params: Sequence[Any] = ()
) -> tuple[int, str] | None:
    """The first of `rows` (row_number, row_values JSON) whose object has a key twice, and
    that key."""
    row = tx.execute(
        f"""
        SELECT row_number, keys FROM (
            SELECT row_number, json_keys(row_values) AS keys FROM ({rows})
        )
        WHERE len(keys) <> len(list_distinct(keys))
        ORDER BY row_number
        LIMIT 1
        """,
        list(params),
    ).fetchone()
    if row is None:
        return None
    keys = list(row[1])
    return int(row[0]), next(k for k in keys if keys.count(k) > 1)


class FileReads:
    """What DuckDB's readers see of a file before any row is stored."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def describe(self, source: Source) -> list[tuple[str, str]]:
        """(column, DuckDB type) the reader sees; FileReadError for a file it refuses."""
        if source.format == "csv":
            return [(c, "VARCHAR") for c in source.csv_columns]
        reader = _json_reader() if source.format == "jsonl" else "read_parquet(?)"
        with self.store.read() as cur, refused(source):
            rows = cur.execute(f"DESCRIBE SELECT * FROM {reader}", [source.path]).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]

    def parquet_fields(self, source: Source) -> list[tuple[str, int]]:
        """A Parquet file's schema as written, depth first from its root: (name, number
        of children) of each element. DuckDB's own names differ: it renames a second `a`
        or `A` to `A_1` and an unnamed column to `C2`."""
        with self.store.read() as cur, refused(source):
            rows = cur.execute(
                "SELECT name, coalesce(num_children, 0) FROM parquet_schema(?) ORDER BY column_id",
                [source.path],
            ).fetchall()
        return [(str(r[0] or ""), int(r[1])) for r in rows]

    def stated_rows(self, source: Source) -> int | None:
        """The rows a Parquet file's footer says it holds (read before any row is); None
        for text formats, whose rows the file size bounds."""
        if source.format != "parquet":
            return None
        with self.store.read() as cur, refused(source):
            row = cur.execute(
                "SELECT sum(num_rows) FROM parquet_file_metadata(?)", [source.path]
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def json_lines_matching(
        self, source: Source, pattern: str, max_openers: int, batch: int = 1000
    ) -> Iterator[str]:
        """Each line of a JSON Lines `source` that matches the RE2 `pattern` or opens more
        than `max_openers` arrays and objects. One scan in DuckDB (no row numbers: they
        would hold every line until the last), `batch` lines in memory at a time."""
        with self.store.read() as cur, refused(source):
            cur.execute(
                f"SELECT line FROM {_json_lines(source)} WHERE regexp_matches(line, ?) "
                # bytes, not characters: translate() or length() took 5 s a million lines
                "OR strlen(line) - strlen(replace(replace(line, '[', ''), '{', '')) > ?",
                [source.path, pattern, max_openers],
            )
            while found := cur.fetchmany(batch):
                yield from (str(line) for (line,) in found)


# ---- DuckDB's refusal of a file, said in one line --------------------------------------

_CSV_LINE = re.compile(r"CSV Error on Line: (\d+)")
_CSV_COUNT = re.compile(r"Expected Number of Columns: (\d+) Found: (\d+)")


@contextmanager
def refused(source: Source) -> Iterator[None]:
    """Raise a DuckDB error met while reading `source` as a FileReadError."""
    try:
        yield
    except duckdb.Error as exc:
        raise FileReadError(_said(exc, source)) from exc


def _said(exc: duckdb.Error, source: Source) -> str:
    where = source.where
    text = str(exc).replace(source.path, where)
    if source.format == "csv":
        return _csv_problem(text, where)
    if source.format == "jsonl" and "non-record JSON" in text:
        return f"{where}: expected JSON objects whose keys name the columns"
    if source.format == "parquet" and ("magic bytes" in text or "too small to be" in text):
        return f"{where}: not a Parquet file"
    return f"{where}: {_first_line(text)}"


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


def _first_line(text: str) -> str:
    text = re.sub(r"^[A-Za-z ]+ Error: ", "", text.strip())
    return text.splitlines()[0] if text else "unknown error"
