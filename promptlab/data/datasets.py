"""Datasets as managed objects: import a file once, then read its rows from the store.

A dataset is imported by DuckDB's own readers, never row by row through Python, in one
transaction with its catalog row: a file that is refused leaves nothing behind. What a
malformed file is, and how it is said (one line naming the file and the place), lives
in `promptlab.data.readers` (shared with feedback and logs) and here for what only a
dataset refuses; the SQL lives in `promptlab.store.datasets` and `promptlab.store.files`.

Values keep what the format says: CSV cells are text (an empty cell is ""), as a
template expects them, and `coerce_text_values` turns them into a variable's declared
type when rows are checked or run; JSON Lines objects are stored exactly as written;
Parquet values keep their column types. A JSON Lines column must hold one kind of value
(objects, arrays, or scalars, with nulls anywhere): a template that looks up
`{{ customer.plan }}` cannot work on a row where `customer` is text.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from promptlab.conversations.replay import check_conversation
from promptlab.data.lines import LineLimits
from promptlab.data.readers import (
    MAX_FILE_BYTES,
    MAX_FILE_ROWS,
    check_jsonl_keys,
    check_row_count,
    describe_file,
    format_of,
    line_of_row,
    precheck,
    reading,
)
from promptlab.errors import DatasetError, NotFoundError, TemplateError, VariableError
from promptlab.prompts.templates import Template, coerce_text_values
from promptlab.records import Conversation, DatasetInfo, RowCheck, RowProblem
from promptlab.store.connection import Store
from promptlab.store.datasets import DatasetTables, DatasetWrites
from promptlab.store.files import JSON_MAX_LINE_BYTES, FileReads, file_source

#: Like prompt names: lowercase letters, digits, '.', '-', '_'.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,79}$")
#: Where a row problem is not about one variable (a render error).
TEMPLATE_COLUMN = "(template)"
#: A dataset file read a line at a time in Python (a run spec's `dataset:` path, a
#: request file for `promptlab batch`): the bounds of an import.
DATASET_LINES = LineLimits(JSON_MAX_LINE_BYTES, MAX_FILE_BYTES, kind="a dataset file")

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


class DatasetStore:
    """Import, list, read and change datasets in one store."""

    def __init__(self, store: Store) -> None:
        self.tables = DatasetTables(store)
        self.files = FileReads(store)

    def import_file(
        self,
        path: str | Path,
        name: str,
        *,
        fmt: str | None = None,
        unit_column: str | None = None,
        replace: bool = False,
        author: str,
        conversation: Conversation | None = None,
        max_bytes: int = MAX_FILE_BYTES,
        max_rows: int = MAX_FILE_ROWS,
    ) -> DatasetInfo:
        """Import `path` as dataset `name`; a refused file leaves nothing stored.

        An existing name is refused unless `replace`, which swaps the rows and the
        catalog row in the same transaction. `max_rows` caps a Parquet file's rows. With
        `conversation`, the rows must make a conversation log (conversations/replay.py).
        """
        check_name(name)
        path = Path(path)
        fmt = format_of(path, fmt)
        where = path.name
        csv_columns = precheck(path, fmt, max_bytes)
        with file_source(fmt, path, csv_columns, max_rows) as source:
            described = describe_file(self.files, source)
            with self.tables.importing() as writes:
                _make_room(writes, name, replace)
                names = [c for c, _type in described]
                with reading(source):
                    count = writes.insert_rows(name, source, names)
                check_row_count(count, source)
                _refuse_empty(count, fmt, where)
                columns = (
                    _jsonl_columns(writes, name, described, path, where)
                    if fmt == "jsonl"
                    else tuple(described)
                )
                if conversation is not None:
                    check_conversation(writes, name, conversation, [c for c, _ in columns], where)
                info = DatasetInfo(
                    name=name,
                    source=where,
                    format=fmt,
                    row_count=count,
                    columns=columns,
                    unit_column=_checked_unit(unit_column, [c for c, _ in columns], where),
                    imported_at=self.tables.store.clock.now(),
                    author=author,
                    conversation=conversation,
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


def _make_room(writes: DatasetWrites, name: str, replace: bool) -> None:
    """Delete dataset `name` to import it again (`replace`); refuse if not replacing."""
    if writes.exists(name):
        if not replace:
            raise DatasetError(
                f"dataset {name!r} already exists: import with replace "
                "(--replace) to replace it, or choose another name"
            )
        writes.delete(name)


def _refuse_empty(count: int, fmt: str, where: str) -> None:
    if count == 0:
        raise DatasetError(
            f"{where}: a header row but no data rows" if fmt == "csv" else f"{where}: no rows"
        )


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
                f"{where}, line {line_of_row(path, row)}, column {column}: "
                f"{_JSON_KINDS.get(found, found.lower())} where line "
                f"{line_of_row(path, first_row)} has {_JSON_KINDS.get(first, first.lower())}; "
                "a column holds objects, arrays or plain values, not a mix"
            )
    return columns
