"""A run's dataset rows: a CSV or JSONL file read and checked here, or an imported dataset.

`RunRows` counts, checks and reads the rows a spec names the same way whichever they
are, so preparing a run never asks which. The file readers below fail early, with line
numbers, on a file that a run would otherwise trip over half-way through planning.
"""

from __future__ import annotations

import csv
import itertools
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from promptlab.conversations.replay import replay_rows
from promptlab.data.batchfile import BatchRequest, check_request_file
from promptlab.data.datasets import DATASET_LINES, DatasetStore
from promptlab.data.jsonl import numbered_jsonl
from promptlab.data.lines import open_lines
from promptlab.engine.plan.planner import unit_id_of
from promptlab.engine.spec.runspec import RunSpec
from promptlab.errors import SpecError
from promptlab.records import Conversation

#: What a request line asks that its model does not take, or None.
LineRefuser = Callable[[BatchRequest], str | None]
#: A JSON Lines file this small (bytes, rows) is kept from its count to its plan, so
#: planning does not parse it once more before a run's first request; a bigger one is
#: read again, a chunk at a time, to plan.
KEPT_FILE_BYTES = 16 * 2**20
KEPT_ROWS = 50_000


class RunRows:
    """The rows a spec names (its file, or its imported dataset), up to its `limit_rows`."""

    def __init__(self, spec: RunSpec, datasets: DatasetStore) -> None:
        self.spec = spec
        self.datasets = datasets
        #: A small JSON Lines file's rows as counted, read in their place until `release`.
        self._kept: list[dict[str, Any]] | None = None

    def count(self) -> int:
        """The dataset's rows, checked readable (a file) or known (an imported dataset);
        a replayed conversation log's user turns."""
        if self.spec.history is not None:
            return self.datasets.tables.user_turns(*self._log())
        if self.spec.dataset is not None:
            count, self._kept = count_and_keep(self.spec.dataset)
            return count
        return self.datasets.get(str(self.spec.dataset_name)).row_count

    def read(self, with_history: bool = False) -> Iterator[Mapping[str, Any]]:
        """The rows in order: the first `limit_rows`, or all. A small file's rows as they
        were counted (until `release`), else read afresh at each call.
        A replay's rows hold their part of their session's history; `with_history` (an
        estimate) adds the history before each turn (conversations/replay.py)."""
        if self._kept is not None:
            return itertools.islice(self._kept, self.spec.limit_rows)
        if self.spec.history is not None:
            log = self._log()
            return replay_rows(self.datasets.tables, *log, self.spec.limit_rows, with_history)
        if self.spec.dataset is not None:
            return iter_rows(self.spec.dataset, self.spec.limit_rows)
        return self.datasets.iter_rows(str(self.spec.dataset_name), self.spec.limit_rows)

    def _log(self) -> tuple[str, Conversation]:
        """The conversation log a replay reads (SpecError when the dataset is not one)."""
        name = self.spec.dataset_name
        info = self.datasets.get(name) if name is not None else None
        if info is None or info.conversation is None:
            raise SpecError(
                f"history: {self.spec.dataset_label} is not a conversation log; import it "
                "with `promptlab dataset import FILE --name NAME --conversation`"
            )
        return info.name, info.conversation

    def planned(self, ceiling: int) -> int:
        """The rows the run plans (the first `limit_rows`), counted now; refused when the
        items they make are over `ceiling`."""
        count = self.count()
        check_plan_size(self.spec, count, ceiling)
        return used_rows(self.spec, count)

    def release(self) -> None:
        """Drop the rows kept from the count (up to KEPT_FILE_BYTES): the plan has read
        them; a later read reads the file again."""
        self._kept = None

    def check_each(self, refusers: Mapping[int, LineRefuser] | None = None) -> None:
        """What a new run checks row by row before it exists: each line of a file sent as
        written is a request (ids unique) its variant's model takes (`refusers`, by
        variant index); each row of a split has a unit id."""
        spec = self.spec
        for index, variant in enumerate(spec.variants):
            if variant.as_written:
                if spec.dataset is None:
                    raise SpecError("requests sent as written are read from a JSONL file")
                refuse = (refusers or {}).get(index)
                # A small file's rows as its count read them (not parsed once more).
                check_request_file(spec.dataset, variant.id_field, refuse, self._kept)
        if spec.split:
            self.check_units()

    def check_unit_column(self) -> None:
        """The unit column exists (SpecError listing the columns there are)."""
        column = str(self.spec.unit_column)
        if self.spec.dataset_name is not None:
            columns = self.datasets.get(self.spec.dataset_name).column_names
        else:
            dataset = self.spec.dataset
            first = next(iter(iter_rows(dataset, 1)), {}) if dataset else {}
            columns = list(first)
        if column not in columns:
            raise SpecError(
                f"unit_column: {self.spec.dataset_label} has no column {column!r} "
                f"(columns: {', '.join(columns)})"
            )

    def check_units(self) -> None:
        """The unit column exists and every row has a unit id (SpecError naming the row)."""
        self.check_unit_column()
        column = str(self.spec.unit_column)
        if self.spec.dataset_name is not None:  # one query in DuckDB, not a pass in Python
            row = self.datasets.first_row_without(
                self.spec.dataset_name, column, self.spec.limit_rows
            )
            if row is not None:
                raise SpecError(f"dataset row {row}: no unit id in column {column!r}")
            return
        for row_index, values in enumerate(self.read()):
            unit_id_of(values, column, row_index)


def used_rows(spec: RunSpec, rows: int) -> int:
    """The dataset rows the run plans: the first `limit_rows` of `rows`, or all."""
    return min(rows, spec.limit_rows) if spec.limit_rows is not None else rows


def check_plan_size(spec: RunSpec, rows: int, ceiling: int) -> int:
    """The number of items the run will plan; refused when it is over `ceiling`."""
    used = used_rows(spec, rows)
    # A split sends each row to one variant; otherwise each row goes through every one.
    per_row = 1 if spec.split else len(spec.variants)
    items = used * per_row * spec.repeats
    if items > ceiling:
        shape = "1 variant (split)" if spec.split else f"{len(spec.variants)} variants"
        raise SpecError(
            f"run spec: {items:,} items ({used:,} rows x {shape} x "
            f"{spec.repeats} repeats) is over the limit of {ceiling:,} items per run "
            "(PROMPTLAB_MAX_ITEMS)"
        )
    return items


def count_and_keep(path: Path) -> tuple[int, list[dict[str, Any]] | None]:
    """`check_dataset`'s count, and a small JSON Lines file's rows (KEPT_FILE_BYTES,
    KEPT_ROWS) as read for it; None for any other file."""
    size = _regular_size(path)
    if path.suffix.lower() == ".csv" or size > KEPT_FILE_BYTES:
        return check_dataset(path), None
    rows = list(itertools.islice(iter_rows(path), KEPT_ROWS + 1))
    if len(rows) <= KEPT_ROWS:
        return len(rows), rows
    return check_dataset(path), None


def _regular_size(path: Path) -> int:
    """The file's size; SpecError when it is no regular file (a FIFO or a device would
    block the read forever, or never end) or cannot be read."""
    try:
        info = path.stat()
    except OSError as exc:
        raise SpecError(f"dataset {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(f"dataset {path}: not a regular file")
    return info.st_size


def check_dataset(path: Path) -> int:
    """Fail early, before a run is created, when the dataset cannot be read or parsed.

    Reads the whole file once (rows are not kept), so a malformed line far down is
    reported with its line number instead of failing the run half-way through planning.
    Returns the number of rows.
    """
    _regular_size(path)
    if path.suffix.lower() != ".csv":
        return sum(1 for _ in iter_rows(path))
    with _csv_lines(path) as lines:
        reader = _csv_reader(lines)
        try:
            if not reader.fieldnames:
                raise SpecError(f"dataset {path}: no header row naming the columns")
            repeated = sorted({c for c in reader.fieldnames if reader.fieldnames.count(c) > 1})
            if repeated:
                raise SpecError(f"dataset {path}: column(s) named twice: {', '.join(repeated)}")
            return sum(1 for _ in reader)
        except csv.Error as exc:
            if "unexpected end of data" in str(exc):
                # The reader consumed the rest of the file looking for the closing quote.
                raise SpecError(
                    f"dataset {path}, line {reader.line_num + 1}: a quoted field is never closed"
                ) from exc
            raise SpecError(
                f"dataset {path}, line {reader.line_num}: not valid CSV ({exc})"
            ) from exc


def iter_rows(path: Path, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Rows of a CSV (header row names the columns) or JSONL file, one at a time."""
    if path.suffix.lower() != ".csv":
        rows = (row for _number, row in numbered_jsonl(path, DATASET_LINES))
        yield from itertools.islice(rows, limit)
        return
    with _csv_lines(path) as lines:
        yield from itertools.islice(_csv_reader(lines), limit)


@contextmanager
def _csv_lines(path: Path) -> Iterator[Iterator[str]]:
    """The lines of a CSV file as the csv module reads them (line ends kept), bounded."""
    with open_lines(path, f"dataset {path}", DATASET_LINES, SpecError) as lines:
        yield (text for _number, text in lines)


def _csv_reader(lines: Iterator[str]) -> csv.DictReader[str]:
    # strict: a quote left open would otherwise swallow the rest of the file into one
    # cell and the run would "complete" on the rows before it.
    return csv.DictReader(lines, strict=True)
