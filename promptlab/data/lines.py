"""Reading a user's text file a line at a time, within limits.

Every reader of a file someone hands promptlab (JSON Lines, unit ids, a vars file)
goes through `numbered_lines`: a line is read with a size bound, never whole, and the
bytes read are counted, so `/dev/zero`, a FIFO that never ends or a single line of
gigabytes stops at the reader's limit instead of filling memory. A regular file over
the size limit is refused before its first byte is read. Problems are one line naming
the file, the line and the limit.

Files DuckDB imports (datasets, feedback, logs) are bounded in `promptlab.data.readers`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from promptlab.errors import PromptlabError

UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class LineLimits:
    """How much one reader takes: the longest line (without its line end) and the whole
    file, in bytes; `kind` names the file in messages ("an outputs file")."""

    line_bytes: int
    file_bytes: int
    kind: str


@contextmanager
def open_lines(
    path: Path, where: str, limits: LineLimits, error: type[PromptlabError]
) -> Iterator[Iterator[tuple[int, str]]]:
    """The numbered lines of the file at `path` (see `numbered_lines`); a regular file
    over the size limit is refused before anything is read. Errors are `error`s that
    begin with `where` (e.g. "outputs out.jsonl")."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise error(f"{where}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        size = _regular_size(handle)
        if size is not None and size > limits.file_bytes:
            raise error(
                f"{where}: {size:,} bytes, more than the {limits.file_bytes:,} "
                f"{limits.kind} may have"
            )
        yield numbered_lines(handle, where, limits, error)


def numbered_lines(
    handle: IO[bytes], where: str, limits: LineLimits, error: type[PromptlabError]
) -> Iterator[tuple[int, str]]:
    """Each line of `handle` with its number (from 1), decoded as UTF-8 with its line
    end kept; a byte order mark before the first line is dropped.

    Stops with an `error` at the first line longer than the limit, or when the bytes
    read pass the file limit (a stream has no size to check first).
    """
    total = 0
    number = 0
    while True:
        try:
            raw = handle.readline(limits.line_bytes + 1)  # one byte more: the line end
        except OSError as exc:
            raise error(f"{where}: cannot read: {exc.strerror or exc}") from exc
        if not raw:
            return
        number += 1
        total += len(raw)
        if total > limits.file_bytes:
            raise error(
                f"{where}, line {number}: past {limits.file_bytes:,} bytes, the most "
                f"{limits.kind} may have"
            )
        if len(raw) > limits.line_bytes and not raw.endswith(b"\n"):
            raise error(
                f"{where}, line {number}: longer than {limits.line_bytes:,} bytes, the most "
                f"a line of {limits.kind} may have"
            )
        if number == 1:
            raw = raw.removeprefix(UTF8_BOM)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{where}, line {number}, byte {exc.start + 1}: not UTF-8 text") from exc
        yield number, text


def _regular_size(handle: IO[bytes]) -> int | None:
    """The size of a regular file; None for a device, FIFO or pipe (no size to trust)."""
    try:
        info = os.fstat(handle.fileno())
    except (OSError, ValueError):  # no descriptor (an in-memory stream)
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
