"""Log lines a collector can read (PROMPTLAB_LOG_FORMAT=json): one JSON object a line,
with the run, item and trace ids the engine binds to the work it is doing.

The parts promptlab runs inside print lines of their own, and in JSON mode they go
through the same formatter (keys redacted, PROMPTLAB_MASK patterns masked): uvicorn
(`promptlab serve`, and the API beside the app) by `uvicorn_logging`, a Celery worker
(`promptlab worker`) by `celery_logging` on its `setup_logging` signal, Streamlit by
promptlab/ui/jsonlogs.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
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
#: (uvicorn's `color_message` is its message with terminal colours: no use in JSON.)
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
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


def json_logs_asked(environ: Mapping[str, str] | None = None) -> bool:
    """Whether PROMPTLAB_LOG_FORMAT asks for JSON lines (a value it cannot write: no; the
    command refuses it in one line of its own when it reads the settings)."""
    env = os.environ if environ is None else environ
    return (env.get("PROMPTLAB_LOG_FORMAT") or "").strip().lower() == "json"


def json_formatter() -> logging.Formatter:
    """The JSON formatter, scrubbing as promptlab's own lines are (PROMPTLAB_MASK)."""
    from promptlab.audit.redact import log_formatter  # it imports this module

    return log_formatter({**os.environ, "PROMPTLAB_LOG_FORMAT": "json"})


def json_handler() -> logging.Handler:
    """A handler writing JSON lines to stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(json_formatter())
    return handler


#: uvicorn's loggers: `uvicorn.error` (startup, errors) passes its lines to `uvicorn`.
UVICORN_LOGGERS = ("uvicorn", "uvicorn.access")


def uvicorn_logging(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """uvicorn.Config's logging arguments: none in text (the caller's stand); in JSON,
    its startup and error lines through one JSON handler on stderr, at INFO. Access
    lines are the API's own (server/access.py): uvicorn's logger for them is shared by
    every uvicorn server in the process, and Streamlit's empties it."""
    if not json_logs_asked(environ):
        return {}
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": json_formatter}},
        "handlers": {
            "json": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            name: {"handlers": ["json"], "level": "INFO", "propagate": False}
            for name in UVICORN_LOGGERS
        }
        | {"uvicorn.error": {"level": "INFO"}},
    }
    return {"log_config": config, "log_level": "info", "access_log": False}


def _uvicorn_formatter(**_: Any) -> logging.Formatter:
    # uvicorn sets `use_colors` on its "default" and "access" formatters' entries before
    # it applies a config, and dictConfig hands such keys to the factory.
    return json_formatter()


def uvicorn_json_defaults() -> None:
    """uvicorn's default logging config made the JSON one, in place: a uvicorn server
    started without a config of its own (Streamlit's, beside the app) applies it, and
    it applies to every uvicorn logger in the process, the API's included. Left as it
    was, Streamlit's start put text handlers back on them."""
    import uvicorn.config

    config = uvicorn_logging({"PROMPTLAB_LOG_FORMAT": "json"})["log_config"]
    factory = {"()": _uvicorn_formatter}
    config["formatters"] = {"json": factory, "default": factory, "access": factory}
    uvicorn.config.LOGGING_CONFIG.clear()
    uvicorn.config.LOGGING_CONFIG.update(config)


def celery_logging(loglevel: int | str = logging.WARNING, **_: Any) -> None:
    """A Celery worker's lines (also the `setup_logging` signal's receiver: connected, it
    stands for Celery's own setup): every logger but promptlab's (which has its own
    handler) passes its records to the root's one JSON handler, at the worker's level;
    Python's warnings too (Celery's about running as root, say)."""
    root = logging.getLogger()
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    root.addHandler(json_handler())
    root.setLevel(loglevel)
    logging.captureWarnings(True)


def celery_said(msg: str, f: Any = None) -> None:
    """Celery's `safe_say` in JSON mode: what its signal handlers tell the operator (a
    warm shutdown, a second Ctrl-C), one JSON line written straight to stderr, as
    Celery writes it (no lock taken: it runs in a signal handler)."""
    with contextlib.suppress(OSError):
        os.write(2, (json_line("celery.apps.worker", logging.WARNING, msg.strip()) + "\n").encode())


def json_line(logger: str, level: int, message: str) -> str:
    """One JSON line from `logger` at `level`, outside the logging machinery."""
    return json_formatter().format(logging.LogRecord(logger, level, "", 0, message, None, None))


def say(message: str, level: int = logging.INFO, logger: str = "promptlab.cli") -> None:
    """A line a long-running command says on stderr (where it serves, what it resumed):
    as written in text, and one JSON object from `logger` at `level` in JSON mode."""
    if json_logs_asked():
        message = json_line(logger, level, message)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
