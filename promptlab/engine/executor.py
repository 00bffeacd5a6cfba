"""The engine: one per process, on its own event-loop thread, shared by every run.

The CLI and the app both call `submit`, `status`, `cancel`, `resume` and `wait` from
their own threads; all provider calls happen on the engine's loop, so async clients
are never bound to a loop that has closed.

The engine keeps the lifecycle: its loop thread, the writer, the active runs and how
they end. What a spec must pass before its run exists is one step, shared by submit,
estimate and resume (engine/prepare.py); the providers and shared limiters live in
engine/lanes.py, and one run's execution in engine/run.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from promptlab.audit.actor import current_actor
from promptlab.audit.chain import RUN_SUBMITTED, Masker, run_chain
from promptlab.audit.redact import redact, watch_env
from promptlab.clock import Clock
from promptlab.config import Settings
from promptlab.data.datasets import DatasetStore
from promptlab.engine.collector import CollectorHold
from promptlab.engine.dependencies import WaitingRuns, resolve_after
from promptlab.engine.estimate import RunEstimate, estimate_run
from promptlab.engine.lanes import EndpointPool, ProviderFactory
from promptlab.engine.prepare import PreparedRun, StoredRun, VersionResolver, prepare_run
from promptlab.engine.progress import Counters, RunProgress
from promptlab.engine.retry import STOP_KINDS
from promptlab.engine.run import RunExecution
from promptlab.engine.spec import RunSpec, parse_spec
from promptlab.engine.spill import spill_dirs, store_spills
from promptlab.engine.writer import STORE_UNWRITABLE, BatchWriter, WriterStats
from promptlab.errors import EngineError, PromptlabError, SpecError, StoreError
from promptlab.providers import build_provider, load_endpoints
from promptlab.providers.config import EndpointConfig
from promptlab.records import FINAL_RUN_STATUSES, AlertRecord, RunStatus
from promptlab.records.states import RESUMED_KINDS
from promptlab.scoring.ended import run_ended
from promptlab.store import ItemStore, ReadModels, RunStore, Store
from promptlab.store.alerts import AlertStore
from promptlab.store.audit import AuditLog
from promptlab.store.connection import is_storage_failure

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds a caller thread waits for the engine loop to answer a quick question.
CALL_TIMEOUT_S = 30.0


@dataclass
class _Active:
    execution: RunExecution | None
    counters: Counters | None
    task: asyncio.Task[None]
    done: threading.Event
    cancel_requested: bool = False
    pause_requested: bool = False


class Engine:
    """Runs batches through shared, rate-limited provider endpoints; see module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        settings: Settings | None = None,
        endpoints: Mapping[str, EndpointConfig] | None = None,
        provider_factory: ProviderFactory = build_provider,
        registry: VersionResolver | None = None,
        runs: RunStore | None = None,
        items: ItemStore | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.runs = runs or RunStore(store)
        self.items = items or ItemStore(store)
        self.reads = ReadModels(store)
        self.alerts = AlertStore(store)
        self.audit_log = AuditLog(store)
        self.settings = settings or Settings.from_env()
        self._endpoints = dict(endpoints or load_endpoints(self.settings.providers_file))
        # Whatever these variables are called, their values never reach the store or logs.
        watch_env(cfg.api_key_env for cfg in self._endpoints.values())
        self._registry = registry
        #: The store's clock unless a test gives another: one clock stamps everything.
        self.clock = clock or store.clock
        #: Providers and shared limiters of every endpoint a run has used (engine/lanes.py).
        self._pool = EndpointPool(provider_factory, self.clock)
        self._active: dict[str, _Active] = {}
        self._claims: set[str] = set()  # runs being resumed, not yet in _active
        #: Cancels that came while their run was being resumed: applied once it starts.
        self._pending_cancels: set[str] = set()
        self._claims_lock = threading.Lock()
        #: Runs waiting for the runs they come after (`after:`; engine/dependencies.py).
        self._waiting = WaitingRuns(
            self.runs, self._claims_lock, (self._claims, self._pending_cancels),
            start=self._start, skip=self._skip,
        )  # fmt: skip
        #: Runs' holds on the collector's tuning (promptlab.engine.collector): a run
        #: still going when `close` gives up on it must not keep the process tuned.
        self._collector_holds: set[CollectorHold] = set()
        #: Final states the store could not take (a full disk): shown until it can.
        self._unrecorded_ends: dict[str, tuple[str, str]] = {}
        self._spill_dirs = spill_dirs(store.path)
        # Rows an earlier process spilled are stored before any run can be resumed.
        store_spills(self.items, self._spill_dirs)
        self._loop = asyncio.new_event_loop()
        # The loop's store calls (asyncio.to_thread) run here, so that `close` can wait for
        # the ones still running: a store closed after the engine must not find its
        # connection busy with a call from a run that close gave up on.
        self._store_calls = concurrent.futures.ThreadPoolExecutor(
            thread_name_prefix="promptlab-store"
        )
        self._loop.set_default_executor(self._store_calls)
        self._thread = threading.Thread(target=self._run_loop, name="promptlab-engine", daemon=True)
        self._thread.start()
        self._writer: BatchWriter = self._call(self._start_writer())
        self._closed = False

    # ---- the loop thread -----------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = CALL_TIMEOUT_S) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise EngineError("the engine did not answer in time") from exc

    async def _start_writer(self) -> BatchWriter:
        writer = BatchWriter(
            self.items, spill_dirs=self._spill_dirs, on_stall=self._on_stall, clock=self.clock,
            answer_log=self.settings.answer_log,
        )  # fmt: skip
        writer.start()
        return writer

    def _settle_writer(self) -> None:
        """Store every answer the writer holds before items are reopened or cancelled.

        A held answer must land as its item's final row: reopening the item would send
        it again, cancelling it would shadow the answer.
        """
        if not self._call(self._writer.flush(), timeout=None):
            raise StoreError(
                f"{self._writer.stalled_reason or STORE_UNWRITABLE}; answers are waiting "
                "to be stored: free space and try again"
            )

    def _on_stall(self, reason: str) -> None:
        """On the loop: the store has not taken writes for a while; stop every run."""
        for active in self._active.values():
            if active.execution is not None:
                active.execution.stop(f"store: {reason}")

    # ---- public API ----------------------------------------------------------------

    def submit(self, spec: RunSpec) -> str:
        """Check the spec, record the run, and start planning and running it; return its id."""
        if spec.schedule is not None:
            raise SpecError(
                f"run spec {spec.name}: it has a schedule ({spec.schedule}); `promptlab schedule "
                "add FILE` registers it, or remove `schedule:` to run it now"
            )
        prepared = self._prepare(spec)
        after = resolve_after(self.runs, spec.after)
        self._call(self._open_lanes(prepared))
        run_id = new_run_id()
        self.runs.create_run(run_id, spec.name, prepared.spec.raw, prepared.variants, after)
        # Before the run's first trace event: its chain is anchored on this event.
        self._audit_change(
            RUN_SUBMITTED,
            run_id,
            {
                "chain": run_chain(run_id),
                "name": spec.name,
                "variants": [
                    {"name": v.name, "version_id": v.prompt_version_id, "model": v.model}
                    for v in prepared.variants
                ],
                "experiment": (spec.experiment or {}).get("name"),
                **({"after": dict(after)} if after else {}),
            },
        )
        if after:
            self._waiting.hold(run_id, prepared, frozenset(dep for _name, dep in after))
        else:
            self._start(run_id, prepared)
        return run_id

    def estimate(self, spec: RunSpec) -> RunEstimate:
        """Requests, tokens, cost and time the spec would take (see engine/estimate.py).

        Checks what `submit` checks first (the unit column, the plan's size). The first
        ESTIMATE_ROWS rows are assigned as the run will assign them (a split: by the
        hash of each row's unit, ramp and kill switch included; with
        `skip_invalid_rows`, minus the rows a template refuses) and scale the dataset.
        """
        prepared = self._prepare(spec, sending=False)
        return estimate_run(
            prepared.variants,
            prepared.plan_sample(),
            prepared.endpoints,
            self.reads.output_history(),
            spec.limits,
        )

    def resume(self, run_id: str) -> str:
        """Continue a run whose process died, or that was cancelled or stopped."""
        # Two sessions may press Resume at once: claim the run before looking at it, so
        # only one of them starts it (two would send every open item twice).
        with self._claims_lock:
            if run_id in self._active or run_id in self._claims:
                raise EngineError(f"run {run_id} is already running")
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
        """Stop dispatching now; in-flight requests finish. Inactive runs are closed at once."""
        with self._claims_lock:
            if run_id in self._claims and run_id not in self._active:
                # Being resumed: closing its items now would be undone when the resume
                # reopens them, and the run would then complete. Cancel it as it starts.
                self._pending_cancels.add(run_id)
                return
            active = self._active.get(run_id)
            # A waiting run cancelled is no longer started when what it waits for ends.
            self._waiting.drop(run_id)
        if active is not None:
            self._audit_change("run.cancelled", run_id, {"active": True})
            self._loop.call_soon_threadsafe(self._halt_on_loop, run_id, False)
            return
        self._settle_writer()
        record = self.runs.get_run(run_id)
        if record.status in FINAL_RUN_STATUSES:
            return
        self.items.cancel_open_items(run_id, "run cancelled")
        run_ended(self.store, run_id, record.spec, RunStatus.CANCELLED, "cancelled", self.submit)
        self.runs.set_status(run_id, RunStatus.CANCELLED, "cancelled")
        self._audit_change("run.cancelled", run_id, {"active": False})
        self._audit_end(run_id, RunStatus.CANCELLED, "cancelled")
        self._waiting.ended(run_id)

    def adopt_waiting(self) -> list[str]:
        """Take over the runs left waiting by a process that is gone (see dependencies.py)."""
        return self._waiting.adopt(self.resume)

    def pause(self, run_id: str) -> None:
        """Stop dispatching now; in-flight requests finish, pending items wait for resume."""
        if run_id not in self._active:
            status = self.runs.get_run(run_id).status
            raise EngineError(f"run {run_id} is {status}, not running here: nothing to pause")
        self._audit_change("run.paused", run_id, {})
        self._loop.call_soon_threadsafe(self._halt_on_loop, run_id, True)

    def status(self, run_id: str) -> RunProgress:
        """Live progress for an active run; stored counts for any other."""
        record = self.runs.get_run(run_id)
        active = self._active.get(run_id)
        status, reason = self._unrecorded_ends.get(run_id, (record.status, record.status_reason))
        common: dict[str, Any] = {
            "run_id": run_id, "name": record.name, "status": status, "reason": reason,
            "submitted_at": record.submitted_at, "started_at": record.started_at,
            "finished_at": record.finished_at,
        }  # fmt: skip
        if active is None or active.counters is None:
            counts = self.reads.item_counts(run_id)
            return RunProgress(
                **common, active=active is not None, total=record.total_items,
                pending=counts["pending"], in_flight=counts["in_flight"],
                succeeded=counts["succeeded"], failed=counts["failed"],
                cancelled=counts["cancelled"], throughput_per_s=None, eta_s=None,
            )  # fmt: skip
        c = active.counters
        lanes = active.execution.lanes if active.execution else ()
        return RunProgress(
            **common, active=True, total=c.total, pending=c.pending, in_flight=c.in_flight,
            succeeded=c.succeeded, failed=c.failed, cancelled=c.cancelled,
            throughput_per_s=c.throughput(), eta_s=c.eta_s(),
            limiters=tuple(lane.limiter.state() for lane in lanes),
        )  # fmt: skip

    def list_runs(self, limit: int = 50) -> list[RunProgress]:
        return [self.status(r.run_id) for r in self.runs.list_runs(limit)]

    def is_active(self, run_id: str) -> bool:
        return run_id in self._active

    def writer_stats(self) -> WriterStats:
        """The batch writer's commits, their latency, failures and spills (a copy)."""
        return replace(self._writer.stats, bucket_counts=list(self._writer.stats.bucket_counts))

    def wait(self, run_id: str, timeout: float | None = None) -> RunProgress:
        """Block until the run is no longer active (or `timeout` passes); return its status."""
        active = self._active.get(run_id)
        if active is not None:
            active.done.wait(timeout)
        return self.status(run_id)

    def close(self) -> None:
        """Cancel active runs, flush the writer, close provider clients, stop the loop.

        Returns once no engine thread uses the store: its store calls still running,
        from a run it gave up waiting for, have ended.
        """
        if self._closed:
            return
        self._closed = True
        self._waiting.close()  # runs cancelled now must not start what waits for them
        try:
            for run_id in list(self._active):
                self.cancel(run_id)
            for active in list(self._active.values()):
                active.done.wait(CALL_TIMEOUT_S)
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CALL_TIMEOUT_S)
            self._store_calls.shutdown(wait=True, cancel_futures=True)
        finally:
            # However closing went, runs given up on must not keep the process tuned.
            for hold in list(self._collector_holds):
                hold.release()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals -----------------------------------------------------------------

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

    def _prepare(
        self, spec: RunSpec, stored: StoredRun | None = None, *, sending: bool = True
    ) -> PreparedRun:
        """The one prepare-run step (engine/prepare.py) with this engine's endpoints, its
        registry (a new run's variants only) and the store's datasets."""
        prepared = prepare_run(
            spec,
            endpoints=self._endpoints,
            datasets=DatasetStore(self.store),
            max_items=self.settings.max_items,
            registry=self._get_registry(),  # a resumed run's summary prompt, pinned
            stored=stored,
            sending=sending,
        )
        # A command line's endpoint may name its own key variable (`--api-key-env`).
        watch_env(cfg.api_key_env for cfg in prepared.endpoints.values())
        return prepared

    def _get_registry(self) -> VersionResolver:
        if self._registry is None:
            from promptlab.prompts.registry import Registry

            self._registry = Registry(self.store)
        return self._registry

    async def _open_lanes(self, prepared: PreparedRun) -> None:
        """On the loop thread: the run's providers and shared limiters, built or reused."""
        self._pool.open(prepared.variants, prepared.endpoints)

    def _start(self, run_id: str, prepared: PreparedRun) -> None:
        """Start the run on the loop: planned first when `prepared.plan_rows` says so."""
        done = threading.Event()

        def launch() -> None:
            task = self._loop.create_task(
                self._tuned(self._drive(run_id, prepared)), name=f"run-{run_id}"
            )
            # Active and unclaimed in one step: a Cancel sees one or the other, never a gap.
            with self._claims_lock:
                cancelled = run_id in self._pending_cancels
                self._pending_cancels.discard(run_id)
                self._active[run_id] = _Active(None, None, task, done, cancel_requested=cancelled)
                self._claims.discard(run_id)
            self._unrecorded_ends.pop(run_id, None)
            task.add_done_callback(lambda _t: self._finish(run_id))
            ready.set()

        ready = threading.Event()
        self._loop.call_soon_threadsafe(launch)
        ready.wait(CALL_TIMEOUT_S)

    def _finish(self, run_id: str) -> None:
        active = self._active.pop(run_id, None)
        if active is not None:
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
        try:
            if prepared.plan_rows is not None:
                await asyncio.to_thread(self.items.plan_items, run_id, prepared.plan(run_id))
            rows = await asyncio.to_thread(self.items.row_count, run_id)
            await asyncio.to_thread(self.runs.set_status, run_id, RunStatus.SCHEDULED)
            record = await asyncio.to_thread(self.runs.get_run, run_id)
            counts = await asyncio.to_thread(self.reads.item_counts, run_id)
            counters = Counters(counts, record.total_items, self.clock)
            alert_writes: list[asyncio.Task[None]] = []

            def store_alerts(alerts: list[AlertRecord]) -> None:
                alert_writes.append(asyncio.create_task(self._store_alerts(run_id, alerts)))

            execution = self._execution(run_id, prepared, rows, counters, store_alerts)
            active.execution, active.counters = execution, counters
            if active.cancel_requested or active.pause_requested:
                self._halt_on_loop(run_id, pause=not active.cancel_requested)
            await asyncio.to_thread(self.runs.set_status, run_id, RunStatus.RUNNING)
            await execution.execute()
            await asyncio.gather(*alert_writes)
            await self._close_run(run_id, execution, prepared.spec)
        except Exception as exc:
            await self._fail_run(run_id, exc, prepared.spec)

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
            run_id, prepared.variants, lanes, spec.retry, self.items, self._writer, counters,
            self.clock, repeats=spec.repeats, rows=rows, alert_sink=alert_sink,
            reask=spec.reask, audit=self.settings.audit, top_logprobs=spec.top_logprobs,
            replay=prepared.replay,
            masker=Masker(self.settings.mask) if self.settings.mask else None,
        )  # fmt: skip

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

    async def _close_run(self, run_id: str, execution: RunExecution, spec: RunSpec) -> None:
        if execution.stop_reason is not None:
            reason = f"stopped: {execution.stop_reason}"
            await self._end_run(run_id, RunStatus.FAILED, reason, reason, spec)
        elif execution.cancelled:
            await self._end_run(run_id, RunStatus.CANCELLED, "cancelled", "run cancelled", spec)
        elif execution.paused:
            await self._writer.flush()  # not an end: no cancelled rows, no end event
            await asyncio.to_thread(self.runs.set_status, run_id, RunStatus.PAUSED, "paused")
        else:
            counts = await asyncio.to_thread(self.reads.item_counts, run_id)
            left = counts["pending"] + counts["in_flight"]
            if left:  # should not happen: say so rather than call the run complete
                reason = f"{left} items were left unfinished"
                await self._end_run(run_id, RunStatus.FAILED, reason, None, spec)
            else:
                await self._end_run(run_id, RunStatus.COMPLETED, None, None, spec)

    async def _end_run(
        self, run_id: str, status: RunStatus, reason: str | None, cancel: str | None, spec: RunSpec
    ) -> None:
        """After-run work (scoring/ended.py; first: a kill during it leaves the run to resume),
        then the end (in memory if unstored); open items' cancelled rows once answers are."""
        flushed = await self._writer.flush()
        try:
            if cancel is not None and flushed:
                await asyncio.to_thread(self.items.cancel_open_items, run_id, cancel)
            if flushed:  # else the store takes no writes: the work could not be stored
                ended = (self.store, run_id, spec, status, reason, self.submit)
                await asyncio.to_thread(run_ended, *ended)
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

    async def _shutdown(self) -> None:
        await self._writer.stop()
        await self._pool.aclose()


def new_run_id() -> str:
    """A short, sortable-enough, unique run id."""
    return "run_" + uuid.uuid4().hex[:12]
