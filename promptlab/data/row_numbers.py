"""Row numbers as a person types them: single rows and ranges, e.g. `1-5` or
`1,3,7-9`, read into a bounded list; a bad part is named in one line.

A person numbers a dataset's rows from 1, as every page, `promptlab items` and the
exports' `row_number` do; programs (`wb.review.add`, the API) name a row by its
`row_index`, from 0. `row_indexes` turns the one into the other."""

from __future__ import annotations

import re

from promptlab.errors import ReviewError

#: Most rows one text may name: ranges are expanded, so `0-999999999` must stop here.
MAX_ROWS = 10_000
#: Longest text read: a person types a few numbers, not a file.
MAX_CHARS = 10_000
EXAMPLE = "e.g. 1-5 or 1,3,7-9"
#: The first row's number, as a person reads it (its `row_index` is 0).
FIRST = 1

# Up to 12 digits a number: far beyond any dataset, short of int()'s digit limit.
_PART = re.compile(r"(\d{1,12})(?:-(\d{1,12}))?")
# "1 - 5" and "1–5" (an en dash, as some keyboards type it) read as "1-5".
_DASH = re.compile(r"\s*[-\u2013]\s*")


def row_indexes(text: str, limit: int = MAX_ROWS) -> list[int]:
    """The `row_index` (from 0) of each row `text` numbers from 1 (`parse_rows`):
    rows `1-5` are the dataset's first five rows, row_index 0 to 4."""
    return [row - FIRST for row in parse_rows(text, limit)]


def parse_rows(text: str, limit: int = MAX_ROWS) -> list[int]:
    """The row numbers `text` names (from 1), in the order first named, each once:
    numbers and `a-b` ranges (both ends included), separated by commas or spaces.
    Refused with a ReviewError naming the bad part: not a number, row 0, a range that
    runs backwards, or past `limit` rows named in all (a row named twice counts twice)."""
    if len(text) > MAX_CHARS:
        raise ReviewError(f"rows: at most {MAX_CHARS:,} characters, got {len(text):,}")
    parts = _DASH.sub("-", text).replace(",", " ").split()
    if not parts:
        raise ReviewError(f"rows: give row numbers, {EXAMPLE}")
    rows: dict[int, None] = {}  # a dict keeps the order rows were first named
    named = 0  # rows named so far, repeats included: the work done stays bounded
    for part in parts:
        first, last = _bounds(part)
        named += last - first + 1
        if named > limit:
            raise ReviewError(f"rows: at most {limit:,} rows at a time; {part!r} goes past it")
        rows.update(dict.fromkeys(range(first, last + 1)))
    return list(rows)


def _bounds(part: str) -> tuple[int, int]:
    """A part's first and last row: `7` is (7, 7), `7-9` is (7, 9)."""
    match = _PART.fullmatch(part)
    if match is None:
        raise ReviewError(f"rows: {part!r} is not a row number or a range ({EXAMPLE})")
    first = int(match.group(1))
    last = first if match.group(2) is None else int(match.group(2))
    if first > last:
        raise ReviewError(f"rows: {part!r} is not a range ({first} > {last})")
    if first < FIRST:
        raise ReviewError(f"rows: {part!r} names row 0; rows are numbered from {FIRST}")
    return first, last
