"""Log lines a collector can read (PROMPTLAB_LOG_FORMAT=json): one JSON object a line,
with the run, item and trace ids the engine binds to the work it is doing."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson

#: The ids a line carries when it is about a run's work, in the order they are written.
CONTEXT_FIELDS = ("run_id", "item_key", "trace_id")

_ids: dict[str, ContextVar[str | None]] = {
    name: ContextVar(f"promptlab_log_{name}", default=None) for name in CONTEXT_FIELDS
}
#: What every record has, whatever was logged: the rest came in `extra=` and is written.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def bind_log_context(
    *, run_id: str | None = None, item_key: str | None = None, trace_id: str | None = None
) -> None:
    """Let the rest of the current task (or thread) log with these ids; tasks and threads
    it starts inherit them. For a coroutine that is its task's whole work (a run, an
    item): the task's context ends with it, so nothing has to unset them."""
    given = {"run_id": run_id, "item_key": item_key, "trace_id": trace_id}
    for name, value in given.items():
        if value is not None:
            _ids[name].set(value)


@contextlib.contextmanager
def log_context(
    *, run_id: str | None = None, item_key: str | None = None, trace_id: str | None = None
) -> Iterator[None]:
    """Log with these ids inside the block (and what it starts); the old ones after."""
    given = {"run_id": run_id, "item_key": item_key, "trace_id": trace_id}
    tokens = [(_ids[name], _ids[name].set(v)) for name, v in given.items() if v is not None]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current_log_context() -> dict[str, str]:
    """The ids bound here now (those that are set)."""
    return {name: value for name, var in _ids.items() if (value := var.get()) is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, milliseconds), level, logger, message, the ids
    that apply, every `extra=` value, and the traceback as `exc`. Every string goes
    through `scrub` first (keys redacted, PROMPTLAB_MASK patterns masked)."""

    def __init__(self, scrub: Callable[[str], str]) -> None:
        super().__init__()
        self._scrub = scrub

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": self._scrub(record.getMessage()),
        }
        bound = current_log_context()
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None) or bound.get(name)
            if value is not None:
                line[name] = self._scrub(str(value))
        for name, value in vars(record).items():
            if name not in _RECORD_FIELDS and name not in line and not name.startswith("_"):
                line[name] = self._value(value)
        if record.exc_info:
            line["exc"] = self._scrub(self.formatException(record.exc_info))
        elif record.exc_text:
            line["exc"] = self._scrub(record.exc_text)
        if record.stack_info:
            line["stack"] = self._scrub(self.formatStack(record.stack_info))
        return orjson.dumps(line).decode()

    def _value(self, value: Any) -> Any:
        """An `extra=` value as JSON, every string in it scrubbed."""
        if value is None or isinstance(value, bool | float):
            return value
        if isinstance(value, int):  # orjson writes 64 bits at most
            return value if -(2**63) <= value < 2**64 else str(value)
        if isinstance(value, Mapping):
            return {str(k): self._value(v) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [self._value(v) for v in value]
        return self._scrub(str(value))


def _utc_time(created: float) -> str:
    """ISO 8601 in UTC with milliseconds, as collectors parse it: 2024-05-01T12:00:00.123Z."""
    stamp = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")
