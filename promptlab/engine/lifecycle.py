"""A run's lifecycle from outside: resume, pause, cancel and wait, each decided under one
lock so racing callers get one outcome.

A run is claimed before anything about it is read or written: a resume claims it in
`_claims` until it is started, a cancel of a run at rest claims it in `_cancelling` until
it is closed. Under the claims lock a second resume is refused, a resume of a run being
cancelled is refused, a cancel of a run being resumed is taken as the run starts, and a
cancel of a going run sets its flag where the run's own end reads it (engine/drive.py),
so it is applied by the run, or, when the run was already ending, once it is at rest.
Exactly one end is recorded for each start, and a cancel that was taken is never lost
(tests/test_lifecycle_races.py races each pair, 50 times). Underneath, the store moves
a run only along the lifecycle's one table (records/states.py RUN_TRANSITIONS), each
move a compare-and-set on the state it leaves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from promptlab.audit.chain import run_chain
from promptlab.engine.drive import ActiveRun, RunDriver, say_run_end
from promptlab.engine.plan.prepare import PreparedRun, StoredRun
from promptlab.engine.record.progress import RunProgress
from promptlab.engine.send.retry import STOP_KINDS
from promptlab.engine.spec.runspec import parse_spec
from promptlab.errors import EngineError
from promptlab.records import FINAL_RUN_STATUSES, RunStatus
from promptlab.records.states import RESUMED_KINDS

log = logging.getLogger(__name__)


class RunLifecycle(RunDriver):
    """Resume, pause, cancel and wait; the Engine's (executor.py) other parts below."""

    _claims: set[str]
    _pending_cancels: set[str]
    _settle_writer: Callable[[], None]
    _prepare: Callable[..., PreparedRun]
    _call: Callable[..., Any]
    _open_lanes: Callable[[PreparedRun], Coroutine[Any, Any, None]]
    _start: Callable[[str, PreparedRun], None]
    status: Callable[[str], RunProgress]

    def resume(self, run_id: str) -> str:
        """Continue a run whose process died, or that was cancelled or stopped."""
        # Two sessions may press Resume at once: claim the run before looking at it, so
        # only one of them starts it (two would send every open item twice).
        with self._claims_lock:
            if run_id in self._active or run_id in self._claims:
                raise EngineError(f"run {run_id} is already running")
            if run_id in self._cancelling:
                raise EngineError(f"run {run_id} is being cancelled: resume it once it is")
            if run_id in self._waiting:
                raise EngineError(f"run {run_id} is waiting for the runs it comes after")
            self._claims.add(run_id)
        try:
            return self._resume_claimed(run_id)
        finally:
            with self._claims_lock:
                self._claims.discard(run_id)
                # A Cancel pressed during a resume that then failed still applies.
                cancel_now = run_id in self._pending_cancels and run_id not in self._active
                self._pending_cancels.discard(run_id)
            if cancel_now:
                self.cancel(run_id)

    def _resume_claimed(self, run_id: str) -> str:
        self._settle_writer()
        record = self.runs.get_run(run_id)
        if record.status == RunStatus.COMPLETED:
            raise EngineError(f"run {run_id} is completed: nothing to resume")
        # A run whose planning never finished (it is scheduled once every item is planned:
        # the process died, or a chunk failed) is planned again from scratch.
        replan = record.scheduled_at is None
        # Stored by a submit, which checked it: its command-line endpoints hold again.
        spec = parse_spec(record.spec, trusted=True)
        stored = StoredRun(run_id, self.runs.variants(run_id), planned=not replan)
        prepared = self._prepare(spec, stored)
        self._call(self._open_lanes(prepared))
        dependencies = self.runs.dependencies(run_id)
        if replan and dependencies:
            # It never started: it waits (or is skipped) again by what it comes after now.
            self.items.clear_plan(run_id)
            self._audit_change("run.resumed", run_id, {"chain": run_chain(run_id), "replan": True})
            self._waiting.hold(run_id, prepared, frozenset(d.run_id for d in dependencies))
            return run_id
        if replan:
            self.items.clear_plan(run_id)
        else:
            reopened = self.items.reopen(run_id, [*(k.value for k in STOP_KINDS), *RESUMED_KINDS])
            log.info("run %s: %d items back to pending", run_id, reopened)
        self._audit_change("run.resumed", run_id, {"chain": run_chain(run_id), "replan": replan})
        self._start(run_id, prepared)
        return run_id

    def cancel(self, run_id: str) -> None:
        """Stop dispatching now; in-flight requests finish. Inactive runs are closed at once.

        Decided under the claims lock, so a resume, another cancel or the run's own end
        cannot come between: a resume under way takes the cancel as it starts; a run
        still going applies it (or, already ending, is cancelled once at rest); a run at
        rest is claimed for the cancel, and a resume meanwhile is refused.
        """
        with self._claims_lock:
            if run_id in self._cancelling:
                return  # a cancel of it is under way
            if run_id in self._claims and run_id not in self._active:
                # Being resumed: closing its items now would be undone when the resume
                # reopens them, and the run would then complete. Cancel it as it starts.
                self._pending_cancels.add(run_id)
                return
            active = self._active.get(run_id)
            if active is not None and active.ending:
                return  # its end is decided (completed, failed): as for a run at rest
            # A waiting run cancelled is no longer started when what it waits for ends.
            self._waiting.drop(run_id)
            if active is None:
                self._cancelling[run_id] = threading.Event()
            else:  # seen by the run's end (drive.py `_close_run`, `_finish`) in any order
                active.cancel_requested = True  # a plan being made stops now, not after a write
        if active is None:
            self._cancel_at_rest(run_id, None)
            return
        try:
            self._audit_change("run.cancelled", run_id, {"active": True})
        finally:
            active.cancel_recorded.set()
        self._loop.call_soon_threadsafe(self._halt_on_loop, run_id, False)

    def _cancel_at_rest(self, run_id: str, ended: ActiveRun | None) -> None:
        """Close a run that is not going (claimed in `_cancelling`); `ended` is the run
        that ended as the cancel came, whose waiters are released once it is closed."""
        try:
            self._settle_writer()
            record = self.runs.get_run(run_id)
            if record.status in FINAL_RUN_STATUSES:
                return
            self.items.cancel_open_items(run_id, "run cancelled")
            self._run_ended(run_id, record.spec, RunStatus.CANCELLED, "cancelled")
            self.runs.set_status(run_id, RunStatus.CANCELLED, "cancelled")
            say_run_end(run_id, RunStatus.CANCELLED, "on request, at rest")
            if ended is None:  # a cancel of a going run recorded its event already
                self._audit_change("run.cancelled", run_id, {"active": False})
            self._audit_end(run_id, RunStatus.CANCELLED, "cancelled")
            self._waiting.ended(run_id)
        finally:
            with self._claims_lock:
                self._cancelling.pop(run_id).set()
            if ended is not None:
                ended.done.set()

    def pause(self, run_id: str) -> None:
        """Stop dispatching now; in-flight requests finish, pending items wait for resume."""
        with self._claims_lock:
            active = self._active.get(run_id)
            ended = active is None or active.ending
        if ended:
            status = self.runs.get_run(run_id).status
            raise EngineError(f"run {run_id} is {status}, not running here: nothing to pause")
        self._audit_change("run.paused", run_id, {})
        self._loop.call_soon_threadsafe(self._halt_on_loop, run_id, True)

    def wait(self, run_id: str, timeout: float | None = None) -> RunProgress:
        """Block until the run is no longer active nor being cancelled (or `timeout`
        passes); return its status."""
        with self._claims_lock:
            active, cancelling = self._active.get(run_id), self._cancelling.get(run_id)
        if active is not None:
            active.done.wait(timeout)
        elif cancelling is not None:
            cancelling.wait(timeout)
        return self.status(run_id)
