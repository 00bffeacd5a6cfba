"""A write batch's rows as JSON lines and back: the one format of the spill files
(promptlab/engine/record/spill.py) and the answer log (promptlab/engine/record/answerlog.py).

Each line is one row with its kind in `row` (`dispatched`, `attempt`, `final`, `audit`);
times are ISO 8601 strings.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import Any

from promptlab.audit.chain import AuditDraft
from promptlab.records import AttemptRow, FinalRow, WriteBatch

#: Fields written as ISO 8601 text, read back as datetimes.
_DATETIME_FIELDS = frozenset({"started_at", "ended_at", "finished_at", "at"})


def add_record(batch: WriteBatch, record: dict[str, Any]) -> None:
    """One line of a spill file (or of the answer log) into `batch`."""
    kind = record.pop("row")
    if kind == "dispatched":
        batch.dispatched.append(record["key"])
    elif kind == "attempt":
        batch.attempts.append(AttemptRow(**_typed(record, AttemptRow)))
    elif kind == "final":
        batch.finals.append(FinalRow(**_typed(record, FinalRow)))
    elif kind == "audit":
        batch.audit.append(AuditDraft(**_typed(record, AuditDraft)))


def _typed(record: dict[str, Any], cls: type) -> dict[str, Any]:
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in record.items() if k in known}
    for name in _DATETIME_FIELDS & values.keys():
        if values[name] is not None:
            values[name] = datetime.fromisoformat(values[name])
    return values
