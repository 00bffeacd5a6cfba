"""The call journal: each answered call on disk before its last byte goes out, folded into
the database after.

A call's record is one JSON line appended to `<database>.gateway/calls.jsonl` with one
`write` (a kill -9 of the server cannot lose what the kernel holds). A thread folds
new lines into the store every PROMPTLAB_GATEWAY_FOLD_S (0.25 s) through
promptlab/store/live_calls.py, in one transaction per batch, and empties the file once
all of it is stored; at start it
folds what a killed process left, and the store skips calls it already has (their
traces are unique), so a restart records nothing twice. The call never waits for the
database.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

#: Most calls stored in one transaction.
MAX_FOLD_CALLS = 5_000

Fold = Callable[[Sequence[Mapping[str, Any]]], int]


def journal_path(database: Path) -> Path:
    """Where the journal of the server on `database` lives."""
    return database.with_name(database.name + ".gateway") / "calls.jsonl"


class CallJournal:
    """Append calls; a thread folds them into the store (`fold`) and empties the file."""

    def __init__(self, path: Path, fold: Fold, every_s: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fold = fold
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._lock = threading.Lock()
        #: One fold at a time: the thread's, or a flush's.
        self._folding = threading.Lock()
        self._offset = 0
        self._wake = threading.Event()
        self._every_s = every_s
        self._closing = False
        #: Calls stored so far by this process (the figure tests and the bench read).
        self.folded = 0
        self._thread = threading.Thread(target=self._run, name="promptlab-gateway", daemon=True)
        self._thread.start()

    def append(self, call: Mapping[str, Any]) -> None:
        line = orjson.dumps(call) + b"\n"
        with self._lock:
            os.write(self._fd, line)

    def flush(self) -> None:
        """Fold everything written so far, now (before a feedback event or a rollout's
        check reads the calls, and at closing)."""
        self._fold_pending()

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        self._thread.join(timeout=30)
        self._fold_pending()
        os.close(self._fd)

    def _run(self) -> None:
        while not self._closing:
            try:
                self._fold_pending()
            except Exception:  # noqa: BLE001 - the journal keeps it; the next fold retries
                log.exception("storing live gateway calls failed; they stay in the journal")
            self._wake.wait(self._every_s)

    def _fold_pending(self) -> None:
        with self._folding:
            # Nothing appended since the last fold (a write is whole once os.write
            # returns): no file opened, as on most feedback posts and idle ticks.
            if os.fstat(self._fd).st_size == self._offset:
                return
            with open(self.path, "rb") as journal:
                journal.seek(self._offset)
                data = journal.read()
            end = data.rfind(b"\n") + 1  # a line cut by a crash waits for nothing
            if end == 0:
                return
            calls = _calls(data[:end])
            for start in range(0, len(calls), MAX_FOLD_CALLS):
                self.folded += self._fold(calls[start : start + MAX_FOLD_CALLS])
            self._offset += end
            with self._lock:
                if os.fstat(self._fd).st_size == self._offset:
                    os.ftruncate(self._fd, 0)
                    self._offset = 0


def _calls(data: bytes) -> list[dict[str, Any]]:
    """The journal's calls; a line that is not one (a torn write) is logged and skipped."""
    calls = []
    for number, line in enumerate(data.splitlines(), 1):
        try:
            call = orjson.loads(line)
        except orjson.JSONDecodeError:
            call = None
        if isinstance(call, dict) and isinstance(call.get("trace"), str):
            calls.append(call)
        elif line.strip():
            log.warning("gateway journal: line %d is not a call; skipped", number)
    return calls
