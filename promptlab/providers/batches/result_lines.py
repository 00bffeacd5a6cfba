"""A batch's results read one line at a time: a line that cannot be read fails its own
item (named by its custom_id where the text still shows one), never the batch.

A provider bills every answered line of a batch, so one line cut short, not an object,
or shaped otherwise than its API documents must not cost the rest: the line becomes a
`server` error naming the batch and the line (the run's retry policy sends that item
again, in a new batch), and a line that names no item is logged and left out (the
items it may have answered are missing from the results, so they are sent again too).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from promptlab.errors import ErrorKind, ProviderError
from promptlab.providers.batches.clients import Outcome

log = logging.getLogger("promptlab.providers.batches")

#: A custom_id as the text of a line shows it, when the line is not readable as a whole.
_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"([^"\\]{1,256})"')
#: What reading a line may raise when the line is not the shape its API documents
#: (WireFormatError and JSONDecodeError are ValueErrors).
_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, IndexError)

Read = Callable[[dict[str, Any]], tuple[str, Outcome]]


def line_outcome(
    raw: str, where: str, batch_id: str, provider: str, read: Read
) -> tuple[str, Outcome] | None:
    """(custom_id, outcome) of one result line through `read`; a line `read` cannot take
    is its item's error, or None (logged) when it names no item; None for a blank line.
    `where` says which line of which file, for the error."""
    if not raw.strip():
        return None
    try:
        row = json.loads(raw)
        if not isinstance(row, dict):
            raise ValueError(f"a JSON {type(row).__name__}, not an object")
        return read(row)
    except _UNREADABLE as exc:
        reason = f"batch {batch_id}: {where} could not be read ({type(exc).__name__}: {exc})"
        found = _CUSTOM_ID.search(raw)
        if found is None:
            log.warning("%s and names no line: what it answered is sent again", reason)
            return None
        error = ProviderError(
            ErrorKind.SERVER, f"{reason}; the run's retry policy sends it again", provider=provider
        )
        return found.group(1), error
