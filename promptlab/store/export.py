"""Result tables written to files by DuckDB's COPY: the queries and their filters.

Every query is `COPY (SELECT ...) TO 'file' (FORMAT ...)`: DuckDB streams the rows to
the file without them passing through Python. Text and JSON columns go through
`replace()` for each secret value given, so a key that reached the store some other
way still reaches no file (messages and outputs were already redacted on write). In a
CSV file they are also neutralised for spreadsheets (promptlab/data/export.py)
unless the export is `raw`. A plugin's format is written by the plugin, from the rows
COPY wrote to a Parquet file in a temporary folder (removed after).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from promptlab.audit.redact import MASK
from promptlab.data.export import (
    Exporter,
    ExportFilters,
    check_items,
    exporter_of,
    sql_neutralised,
)
from promptlab.errors import ExportError, NotFoundError
from promptlab.store.connection import Store
from promptlab.store.item_pages import item_filter
from promptlab.store.runs import fetch_run

if TYPE_CHECKING:
    import pyarrow as pa

#: A run's items as the Runs page lists them (ItemRow), with the full output text;
#: `row_number` is the row as the pages number it (from 1), beside `row_index` (from 0).
_ITEMS = (
    "SELECT i.idempotency_key AS key, i.run_id, i.seq, i.row_index, "
    "i.row_index + 1 AS row_number, v.name AS variant, "
    "i.repeat, i.status, i.error_kind, i.attempts, r.latency_ms, r.output_text, "
    "r.finished_at, {check} AS check_status "
    "FROM items i JOIN run_variants v ON v.run_id = i.run_id AND v.variant_index = i.variant_index "
    "LEFT JOIN results r ON r.run_id = i.run_id AND r.seq = i.seq"
)
#: Versions of one prompt, for the prompt filter.
_PROMPT_VERSIONS = "SELECT id FROM prompt_versions WHERE prompt_name = ?"
#: The runs whose stored spec ran an experiment (the spec keeps its full config).
_EXPERIMENT_RUNS = (
    "SELECT run_id FROM runs WHERE json_extract_string(spec, '$.experiment.name') = ?"
)
#: Name of the Arrow table a computed export registers on its cursor.
_ROWS_VIEW = "promptlab_export_rows"
_TEXT_TYPES = ("VARCHAR", "JSON")


class ExportStore:
    """COPY of the stored tables (and of computed rows) to CSV, Parquet or JSON Lines."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def experiment_runs(self, experiment: str) -> list[str]:
        """Runs of the experiment, oldest first; an unknown experiment is an error."""
        with self.store.read() as cur:
            known = cur.execute("SELECT 1 FROM experiments WHERE name = ?", [experiment])
            runs = [
                r[0]
                for r in cur.execute(
                    f"SELECT run_id FROM runs WHERE run_id IN ({_EXPERIMENT_RUNS}) "
                    "ORDER BY submitted_at, run_id",
                    [experiment],
                ).fetchall()
            ]
            if not runs and known.fetchone() is None:
                raise NotFoundError(f"export: no experiment named {experiment!r}")
        return runs

    def copy_table(
        self,
        table: str,
        fmt: str,
        target: Path,
        filters: ExportFilters,
        secrets: Sequence[str] = (),
        *,
        raw: bool = False,
    ) -> int:
        """COPY a stored table's rows that pass the filters to `target`; the row count.

        The rows come in no particular order: sort by `run_id, seq` (items, results) or
        `idempotency_key, attempt` (attempts) when reading them. A CSV file's text cells
        are neutralised for spreadsheets unless `raw`.
        """
        with self.store.read() as cur:
            query, args = self._select(cur, table, filters)
            # Rows in no set order (each carries its run_id and seq): keeping insertion
            # order, or sorting, made DuckDB buffer a million results past the store's
            # memory limit for CSV and JSON, and took twice as long for Parquet.
            cur.execute("SET SESSION preserve_insertion_order = false")
            return _copy(cur, query, args, fmt, target, secrets, raw=raw)

    def copy_rows(
        self,
        rows: pa.Table,
        fmt: str,
        target: Path,
        secrets: Sequence[str] = (),
        *,
        raw: bool = False,
    ) -> int:
        """COPY computed rows (an Arrow table: metrics, comparisons) to `target`, as
        `copy_table` does."""
        query = f"SELECT * FROM {_ROWS_VIEW}"
        with self.store.read() as cur:
            cur.register(_ROWS_VIEW, rows)
            try:
                return _copy(cur, query, [], fmt, target, secrets, raw=raw)
            finally:
                cur.unregister(_ROWS_VIEW)

    def _select(
        self, cur: duckdb.DuckDBPyConnection, table: str, filters: ExportFilters
    ) -> tuple[str, list[Any]]:
        if filters.run_id is not None:
            fetch_run(cur, filters.run_id)  # an unknown run is an error, not an empty file
        if (
            filters.prompt is not None
            and not cur.execute("SELECT 1 FROM prompts WHERE name = ?", [filters.prompt]).fetchone()
        ):
            raise NotFoundError(f"export: no prompt named {filters.prompt!r}")
        if filters.experiment is not None:
            self.experiment_runs(filters.experiment)  # says so when it is unknown
        columns = _columns(cur, table)
        where: list[str] = []
        args: list[Any] = []
        run_column = {"items": "i.run_id"}.get(table, "run_id")
        if filters.run_id is not None or filters.experiment is not None:
            _needs(table, columns, "run_id", "--run / --experiment")
        if filters.run_id is not None:
            where.append(f"{run_column} = ?")
            args.append(filters.run_id)
        if filters.experiment is not None:
            where.append(f"{run_column} IN ({_EXPERIMENT_RUNS})")
            args.append(filters.experiment)
        if filters.prompt is not None:
            if table == "items":
                where.append(f"v.prompt_version_id IN ({_PROMPT_VERSIONS})")
            elif table == "attempts":
                where.append(
                    "idempotency_key IN (SELECT i.idempotency_key FROM items i "
                    "JOIN run_variants v ON v.run_id = i.run_id "
                    "AND v.variant_index = i.variant_index "
                    f"WHERE v.prompt_version_id IN ({_PROMPT_VERSIONS}))"
                )
            else:
                _needs(table, columns, "prompt_version_id", "--prompt")
                where.append(f"prompt_version_id IN ({_PROMPT_VERSIONS})")
            args.append(filters.prompt)
        if filters.items.named():
            kept, kept_args = _items_kept(table, filters)
            where.append(kept)
            args += kept_args
        condition = f" WHERE {' AND '.join(where)}" if where else ""
        if table == "items":
            check = "r.check_status" if "check_status" in _columns(cur, "results") else "NULL"
            return _ITEMS.format(check=check) + condition, args
        return f"SELECT {_numbered(cur, table)} FROM {table}{condition}", args


def _items_kept(table: str, filters: ExportFilters) -> tuple[str, list[Any]]:
    """The condition keeping the rows of the items a filtered items list shows (the
    same `item_filter` as `ReadModels.items`), for items, results or attempts."""
    check_items(table, filters)
    kept, run_id = filters.items, str(filters.run_id)
    condition, args = item_filter(
        run_id, kept.status, kept.variant, kept.error_kind, kept.search, kept.check
    )
    if table == "items":
        return f"({condition})", args
    column = "seq" if table == "results" else "idempotency_key"
    return f"{column} IN (SELECT i.{column} FROM items i WHERE {condition})", args


def _numbered(cur: duckdb.DuckDBPyConnection, table: str) -> str:
    """A stored table's columns in order and, beside a `row_index` (the dataset row from
    0, for programs), its `row_number`: the row as the pages number it, from 1."""
    columns = cur.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    if ("row_index",) not in columns:
        return "*"
    quoted = ['"' + str(c).replace('"', '""') + '"' for (c,) in columns]
    return ", ".join(
        f"{q}, row_index + 1 AS row_number" if c == "row_index" else q
        for q, (c,) in zip(quoted, columns, strict=True)
    )


def _columns(cur: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    if table == "items":
        return {"run_id"}
    rows = cur.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name = ?",
        [table],
    ).fetchall()
    return {r[0] for r in rows}


def _needs(table: str, columns: set[str], column: str, option: str) -> None:
    if column not in columns:
        raise ExportError(f"export: table {table} has no {column} column; {option} does not apply")


def _copy(
    cur: duckdb.DuckDBPyConnection,
    query: str,
    args: list[Any],
    fmt: str,
    target: Path,
    secrets: Sequence[str],
    *,
    raw: bool,
) -> int:
    exporter = exporter_of(fmt)
    if exporter.copy is None:
        return _plugin_copy(cur, query, args, exporter, target, secrets)
    described = cur.execute(f"DESCRIBE {query}", args).fetchall()
    csv = exporter.copy == "csv"
    select, mask_args = _shown(described, secrets, neutralise=csv and not raw)
    options = f"FORMAT {exporter.copy}" + (", HEADER" if csv else "")
    # The target is already a staged file (promptlab/atomicfile.py): DuckDB's own temp
    # file beside it (`tmp_NAME`) would be left behind by a killed export.
    options += ", USE_TMP_FILE false"
    path = str(target).replace("'", "''")
    try:
        row = cur.execute(
            f"COPY (SELECT {select} FROM ({query}) AS shown) TO '{path}' ({options})",
            [*mask_args, *args],
        ).fetchone()
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"export: cannot write {target}: {first}") from exc
    return int(row[0]) if row else 0


def _plugin_copy(
    cur: duckdb.DuckDBPyConnection,
    query: str,
    args: list[Any],
    exporter: Exporter,
    target: Path,
    secrets: Sequence[str],
) -> int:
    """A plugin's format: the rows (secrets masked) as Parquet in a temporary folder, then
    the plugin's `write` makes the target from them; a failure of its is one line."""
    assert exporter.write is not None
    # Not beside the target: a staged target may be an unnamed file (/proc/self/fd/N).
    with tempfile.TemporaryDirectory(prefix="promptlab-export-") as folder:
        rows = Path(folder) / "rows.parquet"
        count = _copy(cur, query, args, "parquet", rows, secrets, raw=True)
        try:
            exporter.write(rows, target)
        except Exception as exc:  # noqa: BLE001 - the plugin's failure, said as the export's
            raise ExportError(
                f"export: the {exporter.name} format ({exporter.plugin}) failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return count


def _shown(
    described: list[tuple[Any, ...]], secrets: Sequence[str], *, neutralise: bool
) -> tuple[str, list[Any]]:
    """The select list: every text or JSON column with its secret values replaced and,
    with `neutralise`, a formula's first character defused (a JSON cell of a CSV file is
    text too); other columns (numbers, times) as they are."""
    parts: list[str] = []
    args: list[Any] = []
    for name, column_type, *_ in described:
        quoted = '"' + str(name).replace('"', '""') + '"'
        if str(column_type) not in _TEXT_TYPES or not (secrets or neutralise):
            parts.append(quoted)
            continue
        expression = f"{quoted}::VARCHAR"
        for _ in secrets:
            expression = f"replace({expression}, ?, ?)"
        args += list(itertools.chain.from_iterable((s, MASK) for s in secrets))
        if neutralise:
            # Written as text: a quoted formula is no longer valid JSON to cast back to.
            parts.append(f"{sql_neutralised(expression)} AS {quoted}")
            continue
        cast = "::JSON" if column_type == "JSON" else ""
        parts.append(f"({expression}){cast} AS {quoted}")
    return ", ".join(parts), args
