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

from promptlab.records import Conversation, DatasetInfo, SessionSummary, Turn
from promptlab.store.connection import Store
from promptlab.store.files import (
    Source,
    first_duplicate_key,
    keys_in_order,
    refused,
    select_rows,
)

_INFO_COLUMNS = (
    "name, source, format, row_count, columns, unit_column, imported_at, author, conversation"
)
#: A row's value of the column named by the next parameter, as text.
_CELL = "json_extract_string(row_values, '$.' || json_quote(?)::VARCHAR)"
#: A message's place in its session: its order value (`ord`, a column) as a number or a
#: timestamp's epoch, then exactly: turn numbers past 2^53 are one double but not one
#: decimal (28 integer digits).
_KEY_OF_ORD = (
    "{'n': coalesce(try_cast(ord AS DOUBLE), epoch(try_cast(ord AS TIMESTAMPTZ))), "
    "'x': try_cast(ord AS DECIMAL(38, 10))}"
)
#: The same of a row's order cell (three parameters: the order column, three times).
_ORDER_KEY = _KEY_OF_ORD.replace("ord AS", f"{_CELL} AS")


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

    def sessions(self, name: str, conv: Conversation, limit: int) -> list[SessionSummary]:
        """A conversation log's sessions in order of first appearance: messages, user
        turns, first and last order value."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT session, count(*), count(*) FILTER (WHERE role = 'user'), "
                "arg_min(ord, key), arg_max(ord, key), min(row_number) AS first_row FROM "
                f"(SELECT row_number, {_CELL} AS session, {_CELL} AS ord, "
                f"lower(trim({_CELL})) AS role, {_ORDER_KEY} AS key "
                "FROM dataset_rows WHERE dataset = ?) GROUP BY session ORDER BY first_row "
                "LIMIT ?",
                [conv.session, conv.order, conv.role, *[conv.order] * 3, name, limit],
            ).fetchall()
        return [SessionSummary(str(r[0]), int(r[1]), int(r[2]), str(r[3]), str(r[4])) for r in rows]

    def session_turns(self, name: str, conv: Conversation, session: str, limit: int) -> list[Turn]:
        """One session's messages in order."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT ord, role, content, row_number FROM (SELECT row_number, "
                f"{_CELL} AS session, {_CELL} AS ord, lower(trim({_CELL})) AS role, "
                f"{_CELL} AS content, {_ORDER_KEY} AS key FROM dataset_rows "
                "WHERE dataset = ?) WHERE session = ? ORDER BY key LIMIT ?",
                [
                    conv.session,
                    conv.order,
                    conv.role,
                    conv.content,
                    *[conv.order] * 3,
                    name,
                    session,
                    limit,
                ],
            ).fetchall()
        return [
            Turn(str(r[0]), str(r[1]), "" if r[2] is None else str(r[2]), int(r[3])) for r in rows
        ]

    def user_turns(self, name: str, conv: Conversation) -> int:
        """How many user messages the log holds: the turns a replay sends."""
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT count(*) FROM dataset_rows WHERE dataset = ? AND lower(trim({_CELL})) "
                "= 'user'",
                [name, conv.role],
            ).fetchone()
        return int(row[0]) if row else 0

    def messages_by_session(
        self, name: str, conv: Conversation, chunk: int = 2000
    ) -> Iterator[tuple[str, str, str, str, str]]:
        """Every message as (session, role, content, order value, row JSON), sessions in
        order of first appearance and each session's messages in order, fetched `chunk`
        at a time.

        Only the row numbers are sorted; each chunk's rows are then read by number. A
        sort that carried the rows themselves ran out of the store's working memory on
        a log of a million messages."""
        with self.store.read() as cur, self.store.read() as reader:
            cur.execute(
                "WITH m AS NOT MATERIALIZED (SELECT row_number, "
                f"{_CELL} AS session, {_ORDER_KEY} AS key FROM dataset_rows WHERE dataset = ?), "
                "f AS (SELECT session, min(row_number) AS first FROM m GROUP BY session) "
                "SELECT row_number FROM m JOIN f USING (session) ORDER BY first, key",
                [conv.session, *[conv.order] * 3, name],
            )
            while batch := cur.fetchmany(chunk):
                numbers = [int(r[0]) for r in batch]
                found = reader.execute(
                    f"SELECT row_number, {_CELL}, lower(trim({_CELL})), {_CELL}, {_CELL}, "
                    "row_values FROM dataset_rows WHERE dataset = ? AND row_number "
                    "BETWEEN ? AND ? AND list_contains(?, row_number)",
                    [
                        conv.session,
                        conv.role,
                        conv.content,
                        conv.order,
                        name,
                        min(numbers),
                        max(numbers),
                        numbers,
                    ],
                ).fetchall()
                rows = {int(r[0]): r[1:] for r in found}
                for number in numbers:
                    s, r, c, a, v = rows[number]
                    yield (
                        str(s),
                        str(r),
                        "" if c is None else str(c),
                        "" if a is None else str(a),
                        v,
                    )

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

    def conversation_problem(
        self, name: str, conv: Conversation
    ) -> tuple[str, int, str | None, int | None] | None:
        """The first thing that keeps the rows from being a conversation log, as (what,
        row, value, other row): `role` (not system, user or assistant), `session` (blank),
        `order` (neither a number nor a timestamp), `mixed` (numbers and timestamps in
        one log), `twice` (two messages of a session with one order value)."""
        # Each check reads the rows afresh (a query DuckDB streams, or spills), rather
        # than one table of them all in memory: a log of a million messages outgrew the
        # store's working memory that way.
        rows = (
            "WITH conv AS NOT MATERIALIZED (SELECT row_number, "
            f"{_CELL} AS session, {_CELL} AS ord, lower(trim({_CELL})) AS role, "
            f"CASE WHEN try_cast({_CELL} AS DOUBLE) IS NOT NULL THEN 'number' "
            f"WHEN try_cast({_CELL} AS TIMESTAMPTZ) IS NOT NULL THEN 'time' END "
            "AS kind FROM dataset_rows WHERE dataset = ?) "
        )
        params = [conv.session, conv.order, conv.role, conv.order, conv.order, name]
        first = self.tx.execute(
            rows + "SELECT row_number, kind FROM conv ORDER BY row_number LIMIT 1", params
        ).fetchone()
        for what, sql, more in _conversation_checks(first):
            row = self.tx.execute(rows + sql, [*params, *more]).fetchone()
            if row is not None:
                other = None if row[2] is None else int(row[2])
                return what, int(row[0]), row[1], other
        return None

    def insert_info(self, info: DatasetInfo) -> None:
        columns = json.dumps([{"name": n, "type": t} for n, t in info.columns])
        self.tx.execute(
            f"INSERT INTO datasets ({_INFO_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                info.name,
                info.source,
                info.format,
                info.row_count,
                columns,
                info.unit_column,
                info.imported_at,
                info.author,
                json.dumps(info.conversation.columns()) if info.conversation else None,
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
        conversation=Conversation(**json.loads(row[8])) if row[8] else None,
    )


def _conversation_checks(first: tuple[Any, ...] | None) -> tuple[tuple[str, str, list[Any]], ...]:
    """What `conversation_problem` looks for, in order: (what, a query over `conv`
    answering (row, value, other row), its parameters after the rows'). `first` is the
    first row's (row_number, kind), for `mixed`."""
    return (
        (
            "role",
            "SELECT row_number, role, NULL FROM conv WHERE role IS NULL OR role "
            "NOT IN ('system', 'user', 'assistant') ORDER BY 1 LIMIT 1",
            [],
        ),
        (
            "session",
            "SELECT row_number, session, NULL FROM conv "
            "WHERE coalesce(trim(session), '') = '' ORDER BY 1 LIMIT 1",
            [],
        ),
        (
            "order",
            "SELECT row_number, ord, NULL FROM conv WHERE kind IS NULL ORDER BY 1 LIMIT 1",
            [],
        ),
        (
            "mixed",
            "SELECT row_number, ord, ? FROM conv WHERE kind <> ? ORDER BY 1 LIMIT 1",
            [first[0], first[1]] if first else [None, None],
        ),
        # Grouped by a hash of (session, order) first: grouping a million exact keys
        # outgrew the working memory; only rows whose hash repeats are compared exactly.
        (
            "twice",
            "SELECT max(row_number), arg_max(ord, row_number), min(row_number) "
            f"FROM conv WHERE hash(session, {_KEY_OF_ORD}) IN (SELECT hash(session, "
            f"{_KEY_OF_ORD}) FROM conv GROUP BY 1 HAVING count(*) > 1) "
            f"GROUP BY session, {_KEY_OF_ORD} HAVING count(*) > 1 ORDER BY 3 LIMIT 1",
            [],
        ),
    )
