"""The engine's runs on its loop, from plan to recorded end: planned, executed with the
collector tuned, halted on request, and ended (after-run work, the end recorded, or held
in memory while the store cannot take it). The Engine (engine/executor.py) is built on it.
After-run work is the hook the engine was given (engine/ended.py): the engine calls it at
each end, before it records the end.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from promptlab.audit.actor import current_actor
from promptlab.audit.chain import Masker
from promptlab.audit.logjson import bind_log_context
from promptlab.audit.redact import redact
from promptlab.clock import Clock
from promptlab.config import Settings
from promptlab.engine.collector import CollectorHold
from promptlab.engine.ended import RunEnd, RunEndedHook, spec_submit
from promptlab.engine.plan.dependencies import WaitingRuns
from promptlab.engine.plan.planner import PlanStopped
from promptlab.engine.plan.prepare import PreparedRun
from promptlab.engine.record.progress import Counters
from promptlab.engine.record.writer import STORE_UNWRITABLE, BatchWriter
from promptlab.engine.rounds import plan_tiebreaks
from promptlab.engine.run import RunExecution
from promptlab.engine.send.lanes import EndpointPool
from promptlab.engine.spec.runspec import RunSpec, parse_spec
from promptlab.errors import PromptlabError, StoreError
from promptlab.observability.tracing import trace_id_of
from promptlab.providers.config import EndpointConfig
from promptlab.providers.tokens import tokenizer_name
from promptlab.records import AlertRecord, RunStatus
from promptlab.store import ItemStore, ReadModels, RunStore, Store
from promptlab.store.alerts import AlertStore
from promptlab.store.audit import AuditLog
from promptlab.store.connection import is_storage_failure

if TYPE_CHECKING:
    from promptlab.observability.spans import RunSpans, Tracing

# The engine's logger, as before these moved out of engine/executor.py: filters keep working.
log = logging.getLogger("promptlab.engine.executor")


#: Longest a run cancelled while planned waits for its cancel event before its end event.
CANCEL_RECORDED_S = 30.0


@dataclass
class ActiveRun:
    """A run going on the loop: its execution and counters once planned, its task, and
    the event its waiters block on; a cancel or pause asked before the execution exists."""

    execution: RunExecution | None
    counters: Counters | None
    task: asyncio.Task[None]
    done: threading.Event
    #: Set by `Engine.cancel` under the claims lock, on the caller's thread, before it
    #: records the cancel (a write that waits for a plan's open transaction): planning
    #: stops at once, and the run's end reads it.
    cancel_requested: bool = False
    pause_requested: bool = False
    #: Set once the cancel is recorded, so the run's end event follows its cancel event.
    cancel_recorded: threading.Event = field(default_factory=threading.Event)
    #: Ended cancelled by its own end (nothing left for a late cancel to do).
    cancelled: bool = False
    #: Its end is decided and is not a cancel or a pause (completed, failed, stopped): a
    #: cancel or pause from now on finds it ended (set under the claims lock).
    ending: bool = False


class RunDriver:
    """The Engine's part that drives its runs on the loop and records how they end.

    It keeps no state of its own: the attributes below are the engine's, set up by
    `Engine.__init__`.
    """

    store: Store
    runs: RunStore
    items: ItemStore
    reads: ReadModels
    alerts: AlertStore
    audit_log: AuditLog
    settings: Settings
    clock: Clock
    submit: Callable[[RunSpec], str]
    _on_run_ended: RunEndedHook | None
    _loop: asyncio.AbstractEventLoop
    _pool: EndpointPool
    _writer: BatchWriter
    _waiting: WaitingRuns
    _active: dict[str, ActiveRun]
    _claims_lock: threading.Lock
    _cancelling: dict[str, threading.Event]
    #: A cancel that came as a run was ending, applied once it is at rest (lifecycle.py).
    _cancel_at_rest: Callable[[str, ActiveRun | None], None]
    _collector_holds: set[CollectorHold]
    _unrecorded_ends: dict[str, tuple[str, str]]
    _tracing: Tracing | None
    _endpoints: dict[str, EndpointConfig]

    def _audit_change(self, kind: str, run_id: str, payload: dict[str, Any]) -> None:
        """A run's change event (submitted, resumed, cancelled), when the audit is on."""
        if self.settings.audit:
            actor = current_actor(self.settings.author)
            self.audit_log.record_change(kind, actor, payload, run_id=run_id)

    def _audit_end(self, run_id: str, status: str, reason: str | None) -> None:
        if self.settings.audit:
            self.audit_log.record_run_end(
                run_id, self.settings.author, {"status": str(status), "reason": reason}
            )

    def _run_ended(
        self, run_id: str, spec: RunSpec | Mapping[str, Any], status: str, reason: str | None
    ) -> None:
        """The after-run hook, if the engine has one, told of the run's end; `spec` may be
        the run's stored spec (a submit checked it: parsed as trusted)."""
        if self._on_run_ended is None:
            return
        if not isinstance(spec, RunSpec):
            spec = parse_spec(spec, trusted=True)
        submit = spec_submit(self.submit)
        ended = RunEnd(self.store, run_id, spec, str(status), reason, submit, self._endpoints)
        self._on_run_ended(ended)

    def _finish(self, run_id: str) -> None:
        with self._claims_lock:
            active = self._active.pop(run_id, None)
            # A cancel taken while the run was ending (it paused, say): applied now, as
            # to a run at rest; waiters go on waiting until it is (wait() sees it).
            late = active is not None and active.cancel_requested and not active.cancelled
            if late:
                self._cancelling.setdefault(run_id, threading.Event())
        if late:
            self._loop.run_in_executor(None, self._cancel_at_rest, run_id, active)
        elif active is not None:
            active.done.set()
        if self._waiting:  # its status is recorded: what waits for it may go on
            self._loop.run_in_executor(None, self._waiting.ended, run_id)

    def _skip(self, run_id: str, reason: str) -> None:
        self.runs.set_status(run_id, RunStatus.FAILED, reason)  # one it comes after failed
        self._audit_change("run.skipped", run_id, {"reason": reason})
        self._audit_end(run_id, RunStatus.FAILED, reason)

    def _halt_on_loop(self, run_id: str, pause: bool) -> None:
        """Cancel (or pause) an active run, now or as soon as its execution exists."""
        active = self._active.get(run_id)
        if active is not None:
            active.pause_requested |= pause
            active.cancel_requested |= not pause
            if active.execution is not None:
                (active.execution.pause if pause else active.execution.cancel)()

    async def _tuned(self, run: Coroutine[Any, Any, None]) -> None:
        """A run with its hold on the collector's tuning, planning included (it makes an
        object per dataset row and per item)."""
        hold = CollectorHold(self.settings.tune_gc)
        self._collector_holds.add(hold)
        try:
            await run
        finally:
            hold.release()
            self._collector_holds.discard(hold)

    async def _drive(self, run_id: str, prepared: PreparedRun) -> None:
        """Plan the run (when it is not yet), schedule it, run it, record how it ended."""
        active = self._active[run_id]
        spans: RunSpans | None = None
        # The run's task (and every task and thread it starts) logs with its ids.
        traced = f"{trace_id_of(run_id):032x}" if self._tracing is not None else None
        bind_log_context(run_id=run_id, trace_id=traced)
        # The tokenizer the preflight counts with loads (tenths of a second) while the
        # plan is written and read back (DuckDB, mostly off the GIL), not after them.
        tokenizer = asyncio.ensure_future(asyncio.to_thread(tokenizer_name))
        try:
            if prepared.plan_rows is not None:
                # A cancel stops planning where it is (PlanStopped, below), not at its end.
                plan = prepared.plan(run_id, stop=lambda: active.cancel_requested)
                await asyncio.to_thread(self.items.plan_items, run_id, plan)
            rows = await asyncio.to_thread(self.items.row_count, run_id)
            await asyncio.to_thread(self.runs.set_status, run_id, RunStatus.SCHEDULED)
            record = await asyncio.to_thread(self.runs.get_run, run_id)
            counts = await asyncio.to_thread(self.reads.item_counts, run_id)
            counters = Counters(counts, record.total_items, self.clock)
            alert_writes: list[asyncio.Task[None]] = []
            # An alert is the run's: its lines carry no key of the item whose row raised it.
            logs = contextvars.copy_context()

            def store_alerts(alerts: list[AlertRecord]) -> None:
                write = self._store_alerts(run_id, alerts)
                alert_writes.append(asyncio.create_task(write, context=logs.copy()))

            execution = self._execution(run_id, prepared, rows, counters, store_alerts)
            execution.recorder.observer = spans = self._run_spans(run_id, record.name, prepared)
            active.execution, active.counters = execution, counters
            if active.cancel_requested or active.pause_requested:
                self._halt_on_loop(run_id, pause=not active.cancel_requested)
            await asyncio.to_thread(self.runs.set_status, run_id, RunStatus.RUNNING)
            await tokenizer
            await execution.execute()
            if await self._tiebreaks(run_id, prepared, execution, counters):
                await execution.execute()  # the rows its cross-check's models doubt
            await asyncio.gather(*alert_writes)
            await self._close_run(run_id, active, execution, prepared.spec)
        except PlanStopped:
            # Never scheduled, so a resume plans it anew; what was planned is cancelled.
            active.cancelled = True
            await asyncio.to_thread(active.cancel_recorded.wait, CANCEL_RECORDED_S)
            reason = "cancelled while it was being planned"
            await self._end_run(run_id, RunStatus.CANCELLED, reason, "run cancelled", prepared.spec)
        except Exception as exc:
            await self._fail_run(run_id, exc, prepared.spec)
        finally:
            tokenizer.cancel()  # a run that ended before it was needed does not wait for it
            if spans is not None:
                await self._end_spans(run_id, spans)

    async def _tiebreaks(
        self, run_id: str, prepared: PreparedRun, execution: RunExecution, counters: Counters
    ) -> int:
        """A cross-check's tiebreak items, planned once its models answered every row and
        the run was not halted (engine/rounds.py); the items added."""
        if execution.stopping.is_set() or prepared.spec.crosscheck is None:
            return 0
        store, endpoints = self.store, self._endpoints  # an embedder is configured, as drift's
        added = await asyncio.to_thread(plan_tiebreaks, store, run_id, prepared, endpoints)
        counters.total += added
        counters.pending += added
        return added

    def _run_spans(self, run_id: str, name: str, prepared: PreparedRun) -> RunSpans | None:
        """The run's OpenTelemetry spans, when the process exports traces."""
        if self._tracing is None:
            return None
        kinds = {name: cfg.kind for name, cfg in prepared.endpoints.items()}
        masker = Masker(self.settings.mask) if self.settings.mask else None
        return self._tracing.run(run_id, name, kinds, masker)

    async def _end_spans(self, run_id: str, spans: RunSpans) -> None:
        """The run's span closed with the state it was left in (ended or paused)."""
        try:
            record = await asyncio.to_thread(self.runs.get_run, run_id)
            spans.end(str(record.status), record.status_reason)
        except Exception as exc:  # noqa: BLE001 - a trace must never fail the run
            log.warning("run %s: its trace span not ended: %s", run_id, exc)
            spans.end("unknown")

    def _execution(
        self,
        run_id: str,
        prepared: PreparedRun,
        rows: int,
        counters: Counters,
        alert_sink: Callable[[list[AlertRecord]], None],
    ) -> RunExecution:
        spec = prepared.spec
        lanes = self._pool.lanes(prepared.variants, prepared.endpoints, spec.limits)
        return RunExecution(
            run_id,
            prepared.variants,
            lanes,
            spec.retry,
            self.items,
            self._writer,
            counters,
            self.clock,
            repeats=spec.repeats,
            rows=rows,
            alert_sink=alert_sink,
            reask=spec.reask,
            audit=self.settings.audit,
            top_logprobs=spec.top_logprobs,
            replay=prepared.replay,
            cache=spec.cache,
            output_checks=spec.output_checks,
            masker=Masker(self.settings.mask) if self.settings.mask else None,
        )

    async def _fail_run(self, run_id: str, exc: Exception, spec: RunSpec) -> None:
        if is_storage_failure(exc):
            log.error("run %s failed: %s: %s", run_id, STORE_UNWRITABLE, exc)
        elif isinstance(exc, PromptlabError) and not isinstance(exc, StoreError):
            log.error("run %s failed: %s", run_id, exc)  # explained: its message says it all
        else:  # a bug, or the database refusing what the engine wrote: keep the traceback
            log.exception("run %s failed", run_id)
        reason = f"{STORE_UNWRITABLE}: {exc}" if is_storage_failure(exc) else str(exc)
        await self._end_run(run_id, RunStatus.FAILED, reason, f"run failed: {reason}", spec)

    async def _store_alerts(self, run_id: str, alerts: list[AlertRecord]) -> None:
        """A small insert off the loop; an alert the store cannot take is only logged
        (`wb.analysis.detect_anomalies` recomputes every alert from the stored results)."""
        try:
            await asyncio.to_thread(self.alerts.add, alerts)
        except Exception as exc:  # noqa: BLE001 - an alert must never fail the run
            log.warning("run %s: alerts not stored: %s", run_id, exc)
        for alert in alerts:
            log.warning("run %s: alert: %s", run_id, alert.message)

    async def _close_run(
        self, run_id: str, active: ActiveRun, execution: RunExecution, spec: RunSpec
    ) -> None:
        # Decided in one step, under the claims lock a cancel takes: a cancel taken before
        # this ends the run cancelled (before a stop: it was asked and recorded); after
        # it, a run that paused is cancelled once at rest (`_finish`), and one that ends
        # otherwise has ended: the cancel finds nothing to do and records nothing.
        with self._claims_lock:
            cancel = execution.cancelled or active.cancel_requested
            active.ending = not cancel and not execution.paused
        if execution.stop_reason is not None and not cancel:
            reason = f"stopped: {execution.stop_reason}"
            say_run_end(run_id, RunStatus.FAILED, reason)
            await self._end_run(run_id, RunStatus.FAILED, reason, reason, spec)
        elif cancel:
            # Its end event after its cancel event, when the cancel is being recorded.
            active.cancelled = True
            await asyncio.to_thread(active.cancel_recorded.wait, CANCEL_RECORDED_S)
            say_run_end(
                run_id, RunStatus.CANCELLED, "on request; its items not yet answered are cancelled"
            )
            await self._end_run(run_id, RunStatus.CANCELLED, "cancelled", "run cancelled", spec)
        elif execution.paused:
            await self._writer.flush()  # not an end: no cancelled rows, no end event
            await asyncio.to_thread(self.runs.set_status, run_id, RunStatus.PAUSED, "paused")
        else:
            counts = await asyncio.to_thread(self.reads.item_counts, run_id)
            left = counts["pending"] + counts["in_flight"]
            if left:  # should not happen: say so rather than call the run complete
                reason = f"{left} items were left unfinished"
                say_run_end(run_id, RunStatus.FAILED, reason)
                await self._end_run(run_id, RunStatus.FAILED, reason, None, spec)
            else:
                await self._end_run(run_id, RunStatus.COMPLETED, None, None, spec)

    async def _end_run(
        self, run_id: str, status: RunStatus, reason: str | None, cancel: str | None, spec: RunSpec
    ) -> None:
        """After-run work (the run-ended hook; first: a kill during it leaves the run to
        resume), then the end (in memory if unstored); open items' cancelled rows once
        answers are."""
        flushed = await self._writer.flush()
        try:
            if cancel is not None and flushed:
                await asyncio.to_thread(self.items.cancel_open_items, run_id, cancel)
            if flushed:  # else the store takes no writes: the work could not be stored
                await asyncio.to_thread(self._run_ended, run_id, spec, status, reason)
            await asyncio.to_thread(self.runs.set_status, run_id, status, reason)
            self._unrecorded_ends.pop(run_id, None)
            if flushed:  # the chain's head is then stored: the end event pins it
                await asyncio.to_thread(self._audit_end, run_id, status, reason)
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            said = reason or status
            note = (
                f"{said} (not recorded in the database)"
                if STORE_UNWRITABLE in said
                else f"{said} (not recorded: {STORE_UNWRITABLE}: {exc})"
            )
            self._unrecorded_ends[run_id] = (status, redact(note))
            log.error("run %s: %s", run_id, note)


def say_run_end(run_id: str, status: RunStatus, reason: str) -> None:
    """One line on the process that owned a run that stopped short (a quota or auth
    refusal, a cancel, items left): a collector sees why without reading the store.
    A failure says it in `_fail_run`; a completed run says nothing."""
    log.warning(
        "run %s %s: %s",
        run_id,
        status.value,
        reason,
        extra={"run_id": run_id, "run_status": status.value, "reason": reason},
    )
