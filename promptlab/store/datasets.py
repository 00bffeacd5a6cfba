"""Datasets in DuckDB: the catalog and the rows of each imported file.

A file is read by DuckDB's own readers (`promptlab.store.files`) and inserted with one
`INSERT ... SELECT`, so no row passes through Python on the way in. The rules (names,
formats, what a malformed file is and how to say so) stay in `promptlab.data.datasets`
and `promptlab.data.readers`; this module only runs SQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from promptlab.records import DatasetInfo
from promptlab.store.connection import Store
from promptlab.store.files import (
    Source,
    first_duplicate_key,
    keys_in_order,
    refused,
    select_rows,
)

_INFO_COLUMNS = "name, source, format, row_count, columns, unit_column, imported_at, author"


#: The rows of one dataset, as `keys_in_order` and `first_duplicate_key` read them.
_DATASET_ROWS = "SELECT row_number, row_values FROM dataset_rows WHERE dataset = ?"


class DatasetTables:
    """Reads and writes of the `datasets` and `dataset_rows` tables."""

    def __init__(self, store: Store) -> None:
        self.store = store

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
        """Read every row of `source` into `dataset_rows`; returns how many (FileReadError
        for a file DuckDB refuses)."""
        select, params = select_rows(source, columns)
        with refused(source):
            self.tx.execute(
                f"INSERT INTO dataset_rows SELECT ?, * FROM ({select})", [name, *params]
            )
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
