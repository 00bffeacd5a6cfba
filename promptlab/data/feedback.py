"""Feedback events and production logs: import a file whole or not at all, rate a result.

Files are CSV, JSON Lines or Parquet, read by the dataset readers (the same checks and
one-line errors for a malformed file, see `promptlab.data.readers`). Every row is checked
in DuckDB before anything is written; the first bad row is named (its row, or its line
in JSON Lines, its column and value) with how many more there are, and the file is
refused as a whole.

A feedback row names a result by `result_id` (its idempotency key: run, variant and
prompt version are read from the stored result), or a prompt version and a unit
(`version` and `unit_id`). `kind` is one of KINDS, `value` a number (default 1),
`event_time` an ISO 8601 time (UTC unless it says otherwise; the import time if empty).

A production log row is one request: the `version` that served it (`name@1.2.0`,
`name@label` or a version id; a label is resolved when the file is imported), then
`unit_id`, `latency_ms`, `clicked`, `completed` (true/false, 1/0, yes/no) and
`event_time`, each under a column name that may be mapped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

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
from promptlab.errors import DatasetError, FeedbackError, RegistryError
from promptlab.prompts.registry import Registry
from promptlab.store.connection import Store
from promptlab.store.feedback import BadRow, FeedbackTables, FeedbackWrites
from promptlab.store.files import FileReads, Source, file_source

KINDS = ("impression", "click", "thumbs_up", "thumbs_down", "completed")
#: Kinds a person gives in the app on the item view.
RATINGS = ("thumbs_up", "thumbs_down", "click")
#: Ratings that are one opinion per person and result: the latest replaces the earlier.
THUMBS = ("thumbs_up", "thumbs_down")
#: The source of a rating given in the app, followed by `:` and who gave it.
APP_SOURCE = "app"
#: The columns of a feedback file (fixed names).
FEEDBACK_COLUMNS = ("result_id", "version", "unit_id", "kind", "value", "event_time")
#: The fields of a production log, each read from the column of the same name unless
#: mapped (`import_logs(columns={"latency_ms": "duration"})`, `--latency-column`).
LOG_FIELDS = ("version", "unit_id", "latency_ms", "clicked", "completed", "event_time")
#: Distinct version references one file may name (each is resolved in the registry).
MAX_VERSION_REFS = 10_000

_TIME_HINT = "ISO 8601, e.g. 2026-11-01T09:30:00Z"
_REF_HINT = "give name@version, name@label or a version id"


class FeedbackImporter:
    """Import feedback and production logs into one store; rate a result."""

    def __init__(self, store: Store, registry: Registry) -> None:
        self.tables = FeedbackTables(store)
        self.files = FileReads(store)
        self.registry = registry

    def import_feedback(
        self, path: str | Path, *, max_bytes: int = MAX_FILE_BYTES, max_rows: int = MAX_FILE_ROWS
    ) -> int:
        """Import every feedback event of `path`; returns how many. Nothing on a bad row.

        `max_bytes` caps the file's size, and `max_rows` a Parquet file's rows."""

        def fields(found: list[str]) -> dict[str, str | None]:
            columns = {name: _match(name, found) for name in FEEDBACK_COLUMNS}
            where = Path(path).name
            if columns["kind"] is None:
                raise FeedbackError(_missing(where, "kind", found))
            if columns["result_id"] is None and columns["version"] is None:
                raise FeedbackError(
                    f"{where}: no column 'result_id' or 'version' naming what the feedback "
                    f"is about; columns: {', '.join(found)}"
                )
            return columns

        return self._import(path, fields, feedback=True, max_bytes=max_bytes, max_rows=max_rows)

    def import_logs(
        self,
        path: str | Path,
        columns: Mapping[str, str] | None = None,
        *,
        max_bytes: int = MAX_FILE_BYTES,
        max_rows: int = MAX_FILE_ROWS,
    ) -> int:
        """Import every request of a production log; returns how many. Nothing on a bad row.

        `columns` maps a field (LOG_FIELDS) to the file's column for it; `max_bytes` and
        `max_rows` are as for `import_feedback`.
        """
        given = dict(columns or {})
        for field in given:
            if field not in LOG_FIELDS:
                raise FeedbackError(f"no log field {field!r}: fields are {', '.join(LOG_FIELDS)}")

        def fields(found: list[str]) -> dict[str, str | None]:
            where = Path(path).name
            mapped: dict[str, str | None] = {}
            for field in LOG_FIELDS:
                column = _match(given.get(field, field), found)
                if column is None and (field in given or field == "version"):
                    raise FeedbackError(_missing(where, given.get(field, field), found))
                mapped[field] = column
            return mapped

        return self._import(path, fields, feedback=False, max_bytes=max_bytes, max_rows=max_rows)

    def rate(self, run_id: str, key: str, kind: str, *, by: str) -> bool:
        """A rating given in the app by person `by`: a feedback row of source `app:<by>`
        for the result. Returns whether anything was stored.

        A thumb (up or down) is an opinion, one per person and result: the same thumb
        again stores nothing, the other one replaces the person's earlier thumb. A click
        is an event and counts each time; it comes with an impression when the result has
        none left unclicked, so that it counts in the CTR.
        """
        if kind not in KINDS:
            raise FeedbackError(f"rating {kind!r} is not one of {', '.join(KINDS)}")
        found = self.tables.result_of(run_id, key)
        if found is None:
            raise FeedbackError(f"run {run_id} has no result {key!r}")
        version_id, variant = found
        source = f"{APP_SOURCE}:{by}"
        now = self.tables.store.clock.now()
        if kind in THUMBS:
            return self.tables.set_thumb(run_id, key, version_id, variant, kind, source, now)
        # CTR counts a click only against an impression: a reviewer's click brings one,
        # unless the result has an impression no click has used yet.
        kinds: tuple[str, ...] = (kind,)
        if kind == "click":
            counts = self.tables.counts(run_id, key)
            if counts.get("impression", 0) <= counts.get("click", 0):
                kinds = ("impression", "click")
        self.tables.add_rating(run_id, key, version_id, variant, kinds, source, now)
        return True

    # ---- one import ----------------------------------------------------------------

    def _import(
        self,
        path: str | Path,
        fields: Callable[[list[str]], dict[str, str | None]],
        *,
        feedback: bool,
        max_bytes: int,
        max_rows: int,
    ) -> int:
        path = Path(path)
        where = path.name
        what = "a feedback file" if feedback else "a log file"
        try:
            fmt = format_of(path)
            csv_columns = precheck(path, fmt, max_bytes, what)
        except DatasetError as exc:
            raise FeedbackError(str(exc)) from exc
        with file_source(fmt, path, csv_columns, max_rows) as source:
            try:
                found = [c for c, _type in describe_file(self.files, source, what)]
            except DatasetError as exc:
                raise FeedbackError(str(exc)) from exc
            columns = fields(found)
            with self.tables.importing() as writes:
                try:
                    with reading(source):
                        count = writes.stage(source, found)
                except DatasetError as exc:
                    raise FeedbackError(str(exc)) from exc
                _check_staged(writes, count, source, path, what)
                version = columns.get("version")
                refs = self._resolve_refs(writes, version, where) if version else {}
                writes.stage_refs(refs)
                writes.stage_fields(columns)
                bad = writes.first_bad_feedback(KINDS) if feedback else writes.first_bad_log()
                if bad is not None:
                    place = (
                        f"line {line_of_row(path, bad.row_number)}"
                        if fmt == "jsonl"
                        else (f"row {bad.row_number}")
                    )
                    raise FeedbackError(describe_bad_row(f"{where}, {place}", bad, columns))
                now = self.tables.store.clock.now()
                if feedback:
                    return writes.insert_feedback(where, now)
                return writes.insert_logs(where, now)

    def _resolve_refs(self, writes: FeedbackWrites, column: str, where: str) -> dict[str, str]:
        refs = writes.distinct_values(column, MAX_VERSION_REFS + 1)
        if len(refs) > MAX_VERSION_REFS:
            raise FeedbackError(
                f"{where}, column {column}: more than {MAX_VERSION_REFS:,} distinct versions"
            )
        known = writes.known_version_ids(refs)
        return resolve_refs(refs, known, lambda ref: self.registry.resolve(ref).id)


def resolve_refs(
    refs: Iterable[str], known_ids: set[str], resolve: Callable[[str], str]
) -> dict[str, str]:
    """Each reference that names a version, with its id (unknown ones are left out).

    A stored id stands for itself; `name@...` is resolved in the registry. A bare name
    is not a version (it would be whatever is latest at import time).
    """
    resolved: dict[str, str] = {}
    for ref in refs:
        if ref in known_ids:
            resolved[ref] = ref
        elif "@" in ref:
            try:
                resolved[ref] = resolve(ref)
            except RegistryError:  # no such version, or ambiguous: left out
                continue
    return resolved


def _check_staged(
    writes: FeedbackWrites, count: int, source: Source, path: Path, what: str
) -> None:
    """Refuse staged rows that are none, more than the file may bring, or (JSON Lines)
    objects with a key twice or keys that differ only by case, as a dataset refuses them."""
    where = path.name
    if count == 0:
        raise FeedbackError(f"{where}: no rows")
    try:
        check_row_count(count, source, what)
        if source.format == "jsonl":
            check_jsonl_keys(writes.first_duplicate_key(), writes.keys_in_order(), path, where)
    except DatasetError as exc:
        raise FeedbackError(str(exc)) from exc


def describe_bad_row(place: str, bad: BadRow, columns: Mapping[str, str | None]) -> str:
    """One line: where the first bad row is, which column, what is wrong, how many more."""
    values = bad.fields

    def at(field: str) -> str:
        return f"{place}, column {columns.get(field) or field}"

    problems = {
        "kind_missing": lambda: f"{at('kind')}: empty; expected one of {', '.join(KINDS)}",
        "kind_unknown": lambda: (
            f"{at('kind')}: {values['kind']!r} is not one of {', '.join(KINDS)}"
        ),
        "no_target": lambda: (
            f"{place}: no result_id, and no version with a unit_id: a row names a result, "
            "or a prompt version and a unit"
        ),
        "result_unknown": lambda: f"{at('result_id')}: no result has id {values['result_id']!r}",
        "version_missing": lambda: f"{at('version')}: empty; {_REF_HINT}",
        "version_unknown": lambda: (
            f"{at('version')}: {values['version']!r} is no known prompt version ({_REF_HINT})"
        ),
        "value_bad": lambda: f"{at('value')}: {values['value']!r} is not a number",
        "latency_bad": lambda: (
            f"{at('latency_ms')}: {values['latency_ms']!r} is not a latency "
            "(milliseconds, 0 or more)"
        ),
        "clicked_bad": lambda: f"{at('clicked')}: {values['clicked']!r} is not true or false",
        "completed_bad": lambda: f"{at('completed')}: {values['completed']!r} is not true or false",
        # The value is not repeated: it holds a key.
        "unit_key": lambda: (
            f"{at('unit_id')}: looks like a key or token; refused so that none is stored"
        ),
        "time_offset": lambda: (
            f"{at('event_time')}: {values['event_time']!r} has an offset outside -23:59 to +23:59"
        ),
        "time_bad": lambda: (
            f"{at('event_time')}: {values['event_time']!r} is not a time ({_TIME_HINT})"
        ),
    }
    message = problems[bad.problem]()
    more = bad.bad_rows - 1
    if more:
        message += f" (and {more} more bad row{'s' if more > 1 else ''}; nothing was imported)"
    return message


def _match(name: str, found: list[str]) -> str | None:
    """The file's column called `name` (exactly, else ignoring case, as DuckDB compares)."""
    if name in found:
        return name
    return next((c for c in found if c.lower() == name.lower()), None)


def _missing(where: str, column: str, found: list[str]) -> str:
    return f"{where}: no column {column!r}; columns: {', '.join(found)}"
