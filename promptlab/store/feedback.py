"""Feedback events and production logs in DuckDB: staging a file, checking its rows,
and inserting them, all inside one transaction.

A file is read by DuckDB's file readers (`promptlab.store.files`) into a temporary
table of (row_number, row JSON); its fields are pulled out as text, checked by SQL
that names the first bad row, and inserted with one `INSERT ... SELECT`. The rules and
the wording of problems live in `promptlab.data.feedback`; this module only runs SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import duckdb

from promptlab.audit.redact import SECRET_SHAPES
from promptlab.store.connection import Store
from promptlab.store.files import Source, first_duplicate_key, keys_in_order, refused, select_rows

#: Text that reads as true or false in a boolean column (compared lowercased).
TRUE_TEXTS = ("true", "t", "1", "yes", "y")
FALSE_TEXTS = ("false", "f", "0", "no", "n")
_STAGED_ROWS = "SELECT row_number, row_values FROM _staged"


@dataclass(frozen=True)
class BadRow:
    """The first row that failed a check, what failed, its fields, and how many failed."""

    row_number: int
    problem: str
    fields: dict[str, str | None]
    bad_rows: int


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _field(column: str | None) -> str:
    """The trimmed text of `column` in a staged row (NULL when absent or blank)."""
    if column is None:
        return "NULL::VARCHAR"
    pointer = "/" + column.replace("~", "~0").replace("/", "~1")
    return f"nullif(trim(json_extract_string(row_values, {_text(pointer)})), '')"


#: The end of a time with an offset: its hours run 00-23 and minutes 00-59, as ISO 8601
#: and Python have them (DuckDB's cast takes `+25:00` or `-99:00` and moves the time days).
_TIME_END = r"\d:\d\d(:\d\d(\.\d+)?)?\s*"
_REAL_OFFSET = _TIME_END + r"([zZ]|[+-]([01]\d|2[0-3])(:?[0-5]\d)?)$"
_ANY_OFFSET = _TIME_END + r"[+-]\d\d(:?\d\d)?$"


def time_sql(column: str) -> str:
    """`column` (text) as a TIMESTAMPTZ: UTC unless it carries an offset; NULL if not a time."""
    # Without an offset only a date and time may be there: DuckDB's TIMESTAMP cast would
    # drop a zone name (`09:30 America/Los_Angeles`) and read the time as UTC.
    naive = r"^\s*\d{4}-\d\d-\d\d([T ][0-9:.]+)?\s*$"
    return (
        f"CASE WHEN regexp_matches({column}, {_text(_REAL_OFFSET)}) "
        f"THEN try_cast({column} AS TIMESTAMPTZ) "
        f"WHEN regexp_matches({column}, {_text(naive)}) "
        f"THEN timezone('UTC', try_cast({column} AS TIMESTAMP)) END"
    )


#: The checks of a row's event_time, in the order they are reported.
#: A unit id is stored, compared and exported as written, so one shaped like a key (RE2
#: runs the redaction pattern here) is refused rather than kept or masked into another id.
_UNIT_KEY = ("unit_key", f"regexp_matches(f.unit_id, {_text(SECRET_SHAPES.pattern)})")

_TIME_CHECKS = (
    (
        "time_offset",
        f"regexp_matches(f.event_time, {_text(_ANY_OFFSET)}) "
        f"AND NOT regexp_matches(f.event_time, {_text(_REAL_OFFSET)})",
    ),
    ("time_bad", f"f.event_time IS NOT NULL AND {time_sql('f.event_time')} IS NULL"),
)


def bool_sql(column: str) -> str:
    trues = ", ".join(_text(t) for t in TRUE_TEXTS)
    falses = ", ".join(_text(t) for t in FALSE_TEXTS)
    return (
        f"CASE WHEN lower({column}) IN ({trues}) THEN true "
        f"WHEN lower({column}) IN ({falses}) THEN false END"
    )


def _number_sql(column: str) -> str:
    return f"try_cast({column} AS DOUBLE)"


def _bad_number(column: str) -> str:
    number = _number_sql(column)
    return f"({column} IS NOT NULL AND ({number} IS NULL OR NOT isfinite({number})))"


#: A feedback row written here (ratings, a run's events): key, run, version, variant,
#: kind, event time, source, import time; no unit, value 1.
_ROW_INSERT = (
    "INSERT INTO feedback (idempotency_key, run_id, prompt_version_id, variant, unit_id, "
    "kind, value, event_time, source, imported_at) VALUES (?, ?, ?, ?, NULL, ?, 1, ?, ?, ?)"
)


class ShownResult(NamedTuple):
    """A succeeded result as a (simulated) user saw it: what their feedback depends on."""

    key: str
    variant: str
    prompt_version_id: str
    model: str
    output_text: str
    finish_reason: str | None


class FeedbackTables:
    """Writes of `feedback` and `production_logs` (reads are in MetricsReads)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @contextmanager
    def importing(self) -> Iterator[FeedbackWrites]:
        """One transaction: every row of a file is stored, or none is."""
        with self.store.transaction() as tx:
            writes = FeedbackWrites(tx)
            try:
                yield writes
            finally:
                writes.drop_staging()

    def result_of(self, run_id: str, key: str) -> tuple[str, str] | None:
        """(prompt_version_id, variant) of a run's result, or None when it has none."""
        with self.store.read() as cur:
            row = cur.execute(
                "SELECT prompt_version_id, variant FROM results "
                "WHERE run_id = ? AND idempotency_key = ? LIMIT 1",
                [run_id, key],
            ).fetchone()
        return (str(row[0]), str(row[1])) if row else None

    def counts(self, run_id: str, key: str) -> dict[str, int]:
        """Feedback events recorded for one result, by kind (imported and app ratings)."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT kind, count(*) FROM feedback "
                "WHERE run_id = ? AND idempotency_key = ? GROUP BY kind",
                [run_id, key],
            ).fetchall()
        return {str(kind): int(n) for kind, n in rows}

    def add_rating(
        self,
        run_id: str,
        key: str,
        version_id: str,
        variant: str,
        kinds: Sequence[str],
        source: str,
        at: datetime,
    ) -> None:
        with self.store.transaction() as tx:
            tx.executemany(
                _ROW_INSERT,
                [[key, run_id, version_id, variant, kind, at, source, at] for kind in kinds],
            )

    def set_thumb(
        self,
        run_id: str,
        key: str,
        version_id: str,
        variant: str,
        kind: str,
        source: str,
        at: datetime,
    ) -> bool:
        """`source`'s thumb on a result becomes `kind`: its earlier thumbs on the result
        go, in the same transaction. False (nothing written) when it already is `kind`."""
        where = (
            "FROM feedback WHERE run_id = ? AND idempotency_key = ? AND source = ? "
            "AND kind IN ('thumbs_up', 'thumbs_down')"
        )
        args = [run_id, key, source]
        with self.store.transaction() as tx:
            earlier = [str(r[0]) for r in tx.execute(f"SELECT kind {where}", args).fetchall()]
            if earlier == [kind]:
                return False
            tx.execute(f"DELETE {where}", args)
            tx.execute(
                _ROW_INSERT,
                [key, run_id, version_id, variant, kind, at, source, at],
            )
        return True

    def add_run_events(
        self,
        run_id: str,
        source: str,
        events_of: Callable[[list[ShownResult]], list[tuple[str, str]]],
        at: datetime,
    ) -> int:
        """Feedback for a run's succeeded results, once per (run, source): `events_of`
        gets them as shown (ShownResult) and gives (key, kind) events. Returns how many
        were added (0 when the run already has events of `source`)."""
        with self.store.transaction() as tx:
            done = tx.execute(
                "SELECT count(*) FROM feedback WHERE run_id = ? AND source = ?", [run_id, source]
            ).fetchone()
            if done and done[0]:
                return 0
            results = tx.execute(
                "SELECT idempotency_key, variant, prompt_version_id, finished_at, model, "
                "coalesce(output_text, ''), finish_reason FROM results "
                "WHERE run_id = ? AND status = 'succeeded' ORDER BY seq",
                [run_id],
            ).fetchall()
            by_key = {r[0]: r for r in results}
            events = events_of([ShownResult(r[0], r[1], r[2], r[4], r[5], r[6]) for r in results])
            rows = [
                [key, run_id, by_key[key][2], by_key[key][1], kind, by_key[key][3], source, at]
                for key, kind in events
            ]
            if rows:
                tx.executemany(_ROW_INSERT, rows)
        return len(rows)


class FeedbackWrites:
    """Statements of one import transaction, on temporary tables of this cursor."""

    def __init__(self, tx: duckdb.DuckDBPyConnection) -> None:
        self.tx = tx

    def stage(self, source: Source, columns: Sequence[str]) -> int:
        """Read every row of `source` into `_staged`; returns how many (FileReadError for
        a file DuckDB refuses)."""
        select, params = select_rows(source, columns)
        with refused(source):
            self.tx.execute(
                f"CREATE TEMP TABLE _staged AS SELECT * FROM ({select}) "
                "AS t(row_number, row_values)",
                params,
            )
        row = self.tx.execute("SELECT count(*) FROM _staged").fetchone()
        return int(row[0]) if row else 0

    def keys_in_order(self) -> list[tuple[str, int]]:
        """Every top-level key of the staged rows with the row it first appears in."""
        return keys_in_order(self.tx, _STAGED_ROWS)

    def first_duplicate_key(self) -> tuple[int, str] | None:
        """The first staged row whose object has a key twice, and that key."""
        return first_duplicate_key(self.tx, _STAGED_ROWS)

    def distinct_values(self, column: str, limit: int) -> list[str]:
        """Up to `limit` distinct non-blank values of `column` in the staged rows."""
        rows = self.tx.execute(
            f"SELECT DISTINCT {_field(column)} AS v FROM _staged WHERE v IS NOT NULL LIMIT ?",
            [limit],
        ).fetchall()
        return [str(r[0]) for r in rows]

    def known_version_ids(self, candidates: Sequence[str]) -> set[str]:
        """Those of `candidates` that are a stored version id or a result's version id."""
        if not candidates:
            return set()
        rows = self.tx.execute(
            "SELECT id FROM prompt_versions WHERE id IN (SELECT unnest(?)) "
            "UNION SELECT DISTINCT prompt_version_id FROM results "
            "WHERE prompt_version_id IN (SELECT unnest(?))",
            [list(candidates), list(candidates)],
        ).fetchall()
        return {str(r[0]) for r in rows}

    def stage_refs(self, refs: Mapping[str, str]) -> None:
        """`_refs`: each version reference found in the file and the id it resolves to."""
        self.tx.execute("CREATE TEMP TABLE _refs (ref VARCHAR, version_id VARCHAR)")
        if refs:
            self.tx.executemany("INSERT INTO _refs VALUES (?, ?)", [list(p) for p in refs.items()])

    def stage_fields(self, columns: Mapping[str, str | None]) -> None:
        """`_fields`: the staged rows as one text column per field (`columns` maps a
        field to the file's column for it, None when the file has none)."""
        fields = ", ".join(f"{_field(column)} AS {name}" for name, column in columns.items())
        self.tx.execute(f"CREATE TEMP TABLE _fields AS SELECT row_number, {fields} FROM _staged")

    def first_bad_feedback(self, kinds: Sequence[str]) -> BadRow | None:
        allowed = ", ".join(_text(k) for k in kinds)
        checks = (
            ("kind_missing", "f.kind IS NULL"),
            ("kind_unknown", f"f.kind NOT IN ({allowed})"),
            ("no_target", "f.result_id IS NULL AND (f.version IS NULL OR f.unit_id IS NULL)"),
            ("result_unknown", "f.result_id IS NOT NULL AND r.idempotency_key IS NULL"),
            ("version_unknown", "f.result_id IS NULL AND v.version_id IS NULL"),
            ("value_bad", _bad_number("f.value")),
            _UNIT_KEY,
            *_TIME_CHECKS,
        )
        return self._first_bad(
            checks,
            ("result_id", "version", "unit_id", "kind", "value", "event_time"),
            "LEFT JOIN _result_keys r ON r.idempotency_key = f.result_id "
            "LEFT JOIN _refs v ON v.ref = f.version",
            prepare=(
                "CREATE TEMP TABLE _result_keys AS SELECT idempotency_key, "
                "any_value(run_id) AS run_id, any_value(prompt_version_id) AS prompt_version_id, "
                "any_value(variant) AS variant FROM results "
                "WHERE idempotency_key IN (SELECT result_id FROM _fields) GROUP BY ALL"
            ),
        )

    def first_bad_log(self) -> BadRow | None:
        checks = (
            ("version_missing", "f.version IS NULL"),
            ("version_unknown", "v.version_id IS NULL"),
            (
                "latency_bad",
                f"({_bad_number('f.latency_ms')} OR try_cast(f.latency_ms AS DOUBLE) < 0)",
            ),
            ("clicked_bad", f"f.clicked IS NOT NULL AND {bool_sql('f.clicked')} IS NULL"),
            ("completed_bad", f"f.completed IS NOT NULL AND {bool_sql('f.completed')} IS NULL"),
            _UNIT_KEY,
            *_TIME_CHECKS,
        )
        return self._first_bad(
            checks,
            ("version", "unit_id", "latency_ms", "clicked", "completed", "event_time"),
            "LEFT JOIN _refs v ON v.ref = f.version",
        )

    def _first_bad(
        self,
        checks: Sequence[tuple[str, str]],
        names: Sequence[str],
        joins: str,
        prepare: str | None = None,
    ) -> BadRow | None:
        if prepare is not None:
            self.tx.execute(prepare)
        cases = " ".join(f"WHEN {condition} THEN {_text(code)}" for code, condition in checks)
        selected = ", ".join(f"f.{n}" for n in names)
        row = self.tx.execute(
            f"WITH checked AS (SELECT f.row_number, CASE {cases} END AS problem, {selected} "
            f"FROM _fields f {joins}) "
            "SELECT *, count(*) OVER () FROM checked WHERE problem IS NOT NULL "
            "ORDER BY row_number LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        fields = {n: (None if v is None else str(v)) for n, v in zip(names, row[2:-1], strict=True)}
        return BadRow(int(row[0]), str(row[1]), fields, int(row[-1]))

    def insert_feedback(self, source: str, imported_at: datetime) -> int:
        time = time_sql("f.event_time")
        self.tx.execute(
            "INSERT INTO feedback (idempotency_key, run_id, prompt_version_id, variant, unit_id, "
            "kind, value, event_time, source, imported_at) SELECT f.result_id, r.run_id, "
            "coalesce(r.prompt_version_id, v.version_id), r.variant, f.unit_id, f.kind, "
            f"coalesce(try_cast(f.value AS DOUBLE), 1), coalesce({time}, ?), ?, ? "
            "FROM _fields f LEFT JOIN _result_keys r ON r.idempotency_key = f.result_id "
            "LEFT JOIN _refs v ON v.ref = f.version ORDER BY f.row_number",
            [imported_at, source, imported_at],
        )
        return self._count("_fields")

    def insert_logs(self, source: str, imported_at: datetime) -> int:
        self.tx.execute(
            "INSERT INTO production_logs (prompt_version_id, unit_id, latency_ms, clicked, "
            "completed, event_time, source, imported_at) SELECT v.version_id, f.unit_id, "
            f"try_cast(f.latency_ms AS DOUBLE), {bool_sql('f.clicked')}, "
            f"{bool_sql('f.completed')}, coalesce({time_sql('f.event_time')}, ?), ?, ? "
            "FROM _fields f JOIN _refs v ON v.ref = f.version ORDER BY f.row_number",
            [imported_at, source, imported_at],
        )
        return self._count("_fields")

    def _count(self, table: str) -> int:
        row = self.tx.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0

    def drop_staging(self) -> None:
        # Temporary tables live as long as the cursor; a rolled-back transaction has
        # already dropped them, hence IF EXISTS (and a failing drop hides nothing).
        for table in ("_staged", "_refs", "_fields", "_result_keys"):
            try:
                self.tx.execute(f"DROP TABLE IF EXISTS {table}")
            except duckdb.Error:
                return
