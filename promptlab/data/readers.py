"""What a dataset, feedback or log file must be before and while DuckDB reads it.

Datasets (`promptlab.data.datasets`) and feedback and production logs
(`promptlab.data.feedback`) share these checks, so a malformed file is refused the same
way and said the same way: one line naming the file and the place (line, byte, column).
Each check raises DatasetError; the feedback importer says it as a FeedbackError. The
reading itself is DuckDB's (`promptlab.store.files`); here are the rules.
"""

from __future__ import annotations

import csv
import json
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptlab.data.jsonl import MAX_JSON_DEPTH, NotJsonError, strict_loads
from promptlab.errors import DatasetError, FileReadError
from promptlab.store.files import JSON_MAX_LINE_BYTES, FileReads, Source

__all__ = [
    "FORMATS",
    "MAX_COLUMNS",
    "MAX_FILE_BYTES",
    "MAX_FILE_ROWS",
    "MAX_HEADER_BYTES",
    "NUL",
    "SUFFIX_FORMATS",
    "check_file",
    "check_jsonl_keys",
    "check_row_count",
    "csv_header",
    "describe_file",
    "format_of",
    "line_of_row",
    "precheck",
    "reading",
    "refuse_case_twins",
    "refuse_nul_bytes",
]

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
NUL = b"\0"

#: (RE2) What may make a line JSON only to DuckDB's lenient parser: NaN or Infinity as
#: a value, an exponent of 100 or more (1e999 reads as inf), a 1,000-digit integer
#: (Python refuses past 4,300). A match inside a string is parsed and passes.
_LENIENT_JSON = (
    r"(?i)[\[:,]\s*[-+]?(nan|inf|infinity)\s*[\]},]"  # NaN, -Infinity, inf as a value
    r"|[0-9][eE]\+?0*[0-9]{3}|[0-9]{1000}"  # 1e999; digits past what Python converts
)


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


# ---- before DuckDB reads the file ------------------------------------------------------


def precheck(path: Path, fmt: str, max_bytes: int, what: str = "a dataset") -> tuple[str, ...]:
    """Refuse what is wrong before DuckDB reads `path`: not a regular file, empty or over
    `max_bytes`; for CSV a bad header row or a NUL byte. Returns the CSV header's column
    names (none for the other formats)."""
    where = path.name
    check_file(path, where, max_bytes, what)
    if fmt != "csv":
        return ()
    columns = csv_header(path, where)
    refuse_nul_bytes(path, where)
    return columns


def check_file(path: Path, where: str, max_bytes: int, what: str = "a dataset") -> None:
    """Refuse a path that is not a regular file, an empty file, or one over `max_bytes`."""
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


def csv_header(path: Path, where: str) -> tuple[str, ...]:
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
    refuse_case_twins(names, f"{where}, line 1")
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


def refuse_case_twins(names: list[str] | tuple[str, ...], where: str, what: str = "column") -> None:
    """Refuse a name given twice, or two names that differ only by case."""
    # DuckDB compares column names ignoring case: "Ticket" and "ticket" are one column.
    seen: dict[str, str] = {}
    for name in names:
        twin = seen.get(name.lower())
        if twin is not None:
            also = "" if twin == name else f" (as {twin!r}; names are compared ignoring case)"
            raise DatasetError(f"{where}: {what} {name!r} is named twice{also}")
        seen[name.lower()] = name


def refuse_nul_bytes(path: Path, where: str) -> None:
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


# ---- what DuckDB sees of the file --------------------------------------------------------


@contextmanager
def reading(source: Source) -> Iterator[None]:
    """Say a file DuckDB's reader refuses (FileReadError) as a DatasetError. For JSON
    Lines the file is read again line by line to name the first bad line: DuckDB's
    "Malformed JSON" messages count lines from the wrong place (one too many, blank
    lines left out), and some name none."""
    try:
        yield
    except FileReadError as exc:
        located = _locate_jsonl_problem(Path(source.path)) if source.format == "jsonl" else None
        raise DatasetError(f"{source.where}{located}" if located else str(exc)) from exc


def describe_file(
    reads: FileReads, source: Source, what: str = "a dataset"
) -> list[tuple[str, str]]:
    """(column, DuckDB type) of a file, after what is refused before any row is read: a
    JSON Lines line that only a lenient parser reads, a Parquet column named twice or
    not at all, or a footer stating more rows than the cap. Raises DatasetError."""
    where = source.where
    with reading(source):
        described = reads.describe(source)
        if source.format == "jsonl":
            _refuse_lenient_json(reads, source)
        if source.format == "parquet":
            _refuse_bad_parquet_names(reads.parquet_fields(source), where)
            stated = reads.stated_rows(source)
            if source.max_rows is not None and stated is not None and stated > source.max_rows:
                raise DatasetError(
                    f"{where}: {stated:,} rows, more than the {source.max_rows:,} {what} may have"
                )
    return described


def check_row_count(count: int, source: Source, what: str = "a dataset") -> None:
    """Refuse a file that brought more rows than its cap (it is read up to one more)."""
    if source.max_rows is not None and count > source.max_rows:
        raise DatasetError(
            f"{source.where}: more than the {source.max_rows:,} rows {what} may have"
        )


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
            refuse_case_twins(done.names, done.place, done.what)


# ---- JSON Lines ------------------------------------------------------------------------


def check_jsonl_keys(
    duplicate: tuple[int, str] | None, keys: list[tuple[str, int]], path: Path, where: str
) -> None:
    """Refuse a key twice in one object, or two keys that differ only by case (DuckDB
    reads them as one column): `duplicate` is the first (row, key) of the first kind,
    `keys` every key with the row it first appears in."""
    if duplicate is not None:
        row, key = duplicate
        raise DatasetError(
            f"{where}, line {line_of_row(path, row)}: key {key!r} appears twice in one object"
        )
    seen: dict[str, tuple[str, int]] = {}
    for key, first_row in keys:
        twin = seen.get(key.lower())
        if twin is not None:
            twin_key, twin_row = twin
            on = "the same line" if twin_row == first_row else f"line {line_of_row(path, twin_row)}"
            raise DatasetError(
                f"{where}, line {line_of_row(path, first_row)}: column {key!r} is named twice "
                f"(as {twin_key!r} on {on}; names are compared ignoring case)"
            )
        seen[key.lower()] = (key, first_row)


def line_of_row(path: Path, row: int) -> int:
    """The line of the `row`-th object of a JSON Lines file (blank lines are skipped)."""
    seen = 0
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                seen += 1
                if seen == row:
                    return number
    return row


# Not a PromptlabError: a signal from `_no_duplicates` (a json object_pairs_hook) to
# `_locate_jsonl_problem`, which says it as text; it never leaves this module.
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


def _refuse_lenient_json(reads: FileReads, source: Source) -> None:
    """Refuse a JSON Lines file with a line DuckDB reads but JSON does not allow: NaN or
    Infinity (in any case), a number too large for a float, or nesting deeper than
    MAX_JSON_DEPTH (DuckDB's own limit is 128). DuckDB finds the few lines that could be
    one in a scan of the file and Python parses those; if one is, the file is read
    line by line to name the first."""
    for line in reads.json_lines_matching(source, _LENIENT_JSON, MAX_JSON_DEPTH):
        text = line.rstrip("\r")
        try:
            strict_loads(text)
        except (json.JSONDecodeError, NotJsonError) as exc:
            located = _locate_jsonl_problem(Path(source.path))
            raise DatasetError(
                f"{source.where}{located or ': ' + _json_problem(exc, text)}"
            ) from exc


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
