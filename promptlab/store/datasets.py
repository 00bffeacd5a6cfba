"""Datasets in DuckDB: the catalog, the rows, and the reader SQL that imports a file.

Files are read by DuckDB's own readers (`read_csv`, `read_json` for JSON Lines types,
`read_parquet`) and inserted with one `INSERT ... SELECT`, so no row passes through
Python on the way in. The rules (names, formats, what a malformed file is and
how to say so) stay in `promptlab.data.datasets`; this module only runs SQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import duckdb

from promptlab.records import DatasetInfo
from promptlab.store.connection import Store

_INFO_COLUMNS = "name, source, format, row_count, columns, unit_column, imported_at, author"


@dataclass(frozen=True)
class Source:
    """A file to import and how to read it.

    `path` must name one local file with no glob characters (DuckDB's readers expand
    `*`, `?` and `[...]`); `csv_columns` are the names of the CSV header row.
    """

    format: str  # "csv", "jsonl" or "parquet"
    path: str
    csv_columns: tuple[str, ...] = ()
    #: Read at most this many rows and one more (None: every row), so that a file over
    #: its cap is seen to be without being read whole, whatever its metadata says.
    max_rows: int | None = None


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


def _select_rows(source: Source, columns: Sequence[str]) -> tuple[str, list[Any]]:
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


#: The rows of one dataset, as `keys_in_order` and `first_duplicate_key` read them.
_DATASET_ROWS = "SELECT row_number, row_values FROM dataset_rows WHERE dataset = ?"


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


class DatasetTables:
    """Reads and writes of the `datasets` and `dataset_rows` tables."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- reading a file ----------------------------------------------------------------

    def describe(self, source: Source) -> list[tuple[str, str]]:
        """(column, DuckDB type) the reader sees; raises duckdb.Error for a bad file."""
        if source.format == "csv":
            return [(c, "VARCHAR") for c in source.csv_columns]
        reader = _json_reader() if source.format == "jsonl" else "read_parquet(?)"
        with self.store.read() as cur:
            rows = cur.execute(f"DESCRIBE SELECT * FROM {reader}", [source.path]).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]

    def parquet_fields(self, source: Source) -> list[tuple[str, int]]:
        """A Parquet file's schema as written, depth first from its root: (name, number
        of children) of each element. DuckDB's own names differ: it renames a second `a`
        or `A` to `A_1` and an unnamed column to `C2`."""
        with self.store.read() as cur:
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
        with self.store.read() as cur:
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
        with self.store.read() as cur:
            cur.execute(
                f"SELECT line FROM {_json_lines(source)} WHERE regexp_matches(line, ?) "
                # bytes, not characters: translate() or length() took 5 s a million lines
                "OR strlen(line) - strlen(replace(replace(line, '[', ''), '{', '')) > ?",
                [source.path, pattern, max_openers],
            )
            while found := cur.fetchmany(batch):
                yield from (str(line) for (line,) in found)

    # ---- writing -------------------------------------------------------------------

    @contextmanager
    def importing(self) -> Iterator[DatasetWrites]:
        """One transaction: rows and catalog row are stored together, or neither is."""
        with self.store.transaction() as tx:
            yield DatasetWrites(tx)

    def set_unit_column(self, name: str, column: str | None) -> None:
        with self.store.transaction() as tx:
            tx.execute("UPDATE datasets SET unit_column = ? WHERE name = ?", [column, name])

    def delete(self, name: str) -> None:
        with self.store.transaction() as tx:
            DatasetWrites(tx).delete(name)

    # ---- reading the store -------------------------------------------------------------

    def infos(self) -> list[DatasetInfo]:
        with self.store.read() as cur:
            rows = cur.execute(f"SELECT {_INFO_COLUMNS} FROM datasets ORDER BY name").fetchall()
        return [_info(r) for r in rows]

    def info(self, name: str) -> DatasetInfo | None:
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {_INFO_COLUMNS} FROM datasets WHERE name = ?", [name]
            ).fetchone()
        return _info(row) if row else None

    def names(self) -> list[str]:
        with self.store.read() as cur:
            rows = cur.execute("SELECT name FROM datasets ORDER BY name").fetchall()
        return [r[0] for r in rows]

    def first_row_without(self, name: str, column: str, limit: int | None = None) -> int | None:
        """The first row (1-based) whose `column` is missing, null, empty or blank."""
        with self.store.read() as cur:
            found = cur.execute(
                "SELECT min(row_number) FROM dataset_rows WHERE dataset = ? "
                "AND row_number <= ? AND coalesce(trim(json_extract_string(row_values, "
                "'$.' || json_quote(?)::VARCHAR)), '') = ''",
                [name, limit if limit is not None else 2**62, column],
            ).fetchone()
        return int(found[0]) if found and found[0] is not None else None

    def rows(self, name: str, limit: int | None = None, chunk: int = 5000) -> Iterator[str]:
        """Each row's JSON text in row order, read `chunk` rows at a time.

        One range of row numbers per query, all in one read transaction (one snapshot):
        a single ORDER BY over every row would sort them all, and ran out of the store's
        working memory at 3 million rows.
        """
        with self.store.read() as cur:
            cur.begin()
            try:
                found = cur.execute(
                    "SELECT row_count FROM datasets WHERE name = ?", [name]
                ).fetchone()
                end = int(found[0]) if found else 0
                end = end if limit is None else min(end, limit)
                for first in range(0, end, chunk):
                    cur.execute(
                        "SELECT row_values FROM dataset_rows WHERE dataset = ? "
                        "AND row_number > ? AND row_number <= ? ORDER BY row_number",
                        [name, first, min(first + chunk, end)],
                    )
                    for (values,) in cur.fetchall():
                        yield values
            finally:
                cur.rollback()  # nothing was written: this only ends the snapshot


class DatasetWrites:
    """Statements of one import transaction."""

    def __init__(self, tx: duckdb.DuckDBPyConnection) -> None:
        self.tx = tx

    def exists(self, name: str) -> bool:
        row = self.tx.execute("SELECT count(*) FROM datasets WHERE name = ?", [name]).fetchone()
        return bool(row and row[0])

    def delete(self, name: str) -> None:
        self.tx.execute("DELETE FROM dataset_rows WHERE dataset = ?", [name])
        self.tx.execute("DELETE FROM datasets WHERE name = ?", [name])

    def insert_rows(self, name: str, source: Source, columns: Sequence[str]) -> int:
        """Read every row of `source` into `dataset_rows`; returns how many."""
        select, params = _select_rows(source, columns)
        self.tx.execute(f"INSERT INTO dataset_rows SELECT ?, * FROM ({select})", [name, *params])
        row = self.tx.execute(
            "SELECT count(*) FROM dataset_rows WHERE dataset = ?", [name]
        ).fetchone()
        return int(row[0]) if row else 0

    def keys_in_order(self, name: str) -> list[tuple[str, int]]:
        """Every top-level key of the rows (JSON Lines) with the row it first appears in."""
        return keys_in_order(self.tx, _DATASET_ROWS, [name])

    def first_duplicate_key(self, name: str) -> tuple[int, str] | None:
        """The first row (JSON Lines) whose object has a key twice, and that key."""
        return first_duplicate_key(self.tx, _DATASET_ROWS, [name])

    def first_kind_change(self, name: str, column: str) -> tuple[int, str, int, str] | None:
        """The first row whose `column` is an object, an array or a scalar when the first
        non-null value is another of these: (row, its JSON type, first row, its type)."""
        pointer = "/" + column.replace("~", "~0").replace("/", "~1")
        row = self.tx.execute(
            """
            WITH typed AS (
                SELECT row_number, json_type(row_values, ?) AS type
                FROM dataset_rows WHERE dataset = ?
            ),
            kinds AS (
                SELECT row_number, type,
                       CASE type WHEN 'OBJECT' THEN 'object' WHEN 'ARRAY' THEN 'array'
                                 ELSE 'scalar' END AS kind
                FROM typed WHERE type IS NOT NULL AND type <> 'NULL'
            ),
            first AS (SELECT * FROM kinds ORDER BY row_number LIMIT 1)
            SELECT kinds.row_number, kinds.type, first.row_number, first.type
            FROM kinds, first
            WHERE kinds.kind <> first.kind
            ORDER BY kinds.row_number
            LIMIT 1
            """,
            [pointer, name],
        ).fetchone()
        return (int(row[0]), str(row[1]), int(row[2]), str(row[3])) if row else None

    def insert_info(self, info: DatasetInfo) -> None:
        columns = json.dumps([{"name": n, "type": t} for n, t in info.columns])
        self.tx.execute(
            f"INSERT INTO datasets ({_INFO_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                info.name,
                info.source,
                info.format,
                info.row_count,
                columns,
                info.unit_column,
                info.imported_at,
                info.author,
            ],
        )


def _info(row: tuple[Any, ...]) -> DatasetInfo:
    columns = tuple((c["name"], c["type"]) for c in json.loads(row[4]))
    return DatasetInfo(
        name=row[0],
        source=row[1],
        format=row[2],
        row_count=int(row[3]),
        columns=columns,
        unit_column=row[5],
        imported_at=row[6],
        author=row[7],
    )
