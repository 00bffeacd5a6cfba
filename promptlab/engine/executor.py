"""The engine: one per process, on its own event-loop thread, shared by every run.

The CLI and the app both call `submit`, `status`, `cancel`, `resume` and `wait` from
their own threads; all provider calls happen on the engine's loop, so async clients
are never bound to a loop that has closed.

The engine keeps its loop thread, the writer and the active runs. What a spec must
pass before its run exists is one step, shared by submit, estimate and resume
(engine/plan/prepare.py); the providers and shared limiters live in engine/send/lanes.py; a run's
resume, pause and cancel in engine/lifecycle.py, how each run goes on the loop and
ends in engine/drive.py (the Engine is built on both), and one run's execution in
engine/run.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from promptlab.audit.chain import RUN_SUBMITTED, run_chain
from promptlab.audit.redact import watch_env
from promptlab.clock import Clock
from promptlab.config import Settings
from promptlab.data.datasets import DatasetStore
from promptlab.engine.collector import CollectorHold
from promptlab.engine.drive import ActiveRun
from promptlab.engine.ended import RunEndedHook
from promptlab.engine.lifecycle import RunLifecycle
from promptlab.engine.plan.dependencies import WaitingRuns, resolve_after
from promptlab.engine.plan.estimate import RunEstimate, estimate_run
from promptlab.engine.plan.prepare import PreparedRun, StoredRun, VersionResolver, prepare_run
from promptlab.engine.record.progress import RunProgress
from promptlab.engine.record.spill import spill_dirs, store_spills
from promptlab.engine.record.writer import STORE_UNWRITABLE, BatchWriter, WriterStats
from promptlab.engine.send.lanes import EndpointPool, LiveLane, ProviderFactory
from promptlab.engine.send.limiter import EndpointLimiter
from promptlab.engine.spec.runspec import RunSpec
from promptlab.errors import ConfigError, EngineError, SpecError, StoreError
from promptlab.observability.tracing import tracing_from_env
from promptlab.providers import build_provider, load_endpoints
from promptlab.providers.base import Provider
from promptlab.providers.config import EndpointConfig
from promptlab.store import ItemStore, ReadModels, RunStore, Store
from promptlab.store.alerts import AlertStore
from promptlab.store.audit import AuditLog

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds a caller thread waits for the engine loop to answer a quick question.
CALL_TIMEOUT_S = 30.0


class Engine(RunLifecycle):
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
        on_run_ended: RunEndedHook | None = None,
    ) -> None:
        self.store = store
        self._on_run_ended = on_run_ended  # after-run work at each end (engine/ended.py)
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
        #: Providers and shared limiters of every endpoint a run has used (engine/send/lanes.py).
        self._pool = EndpointPool(provider_factory, self.clock, store)
        self._active: dict[str, ActiveRun] = {}
        #: Runs being resumed (not yet in _active), cancels that came meanwhile, and runs
        #: at rest being cancelled with the event their waiters block on (lifecycle.py).
        self._claims, self._pending_cancels = set[str](), set[str]()
        self._cancelling: dict[str, threading.Event] = {}
        self._claims_lock = threading.Lock()
        #: Runs waiting for the runs they come after (`after:`; engine/plan/dependencies.py).
        self._waiting = WaitingRuns(
            self.runs,
            self._claims_lock,
            (self._claims, self._pending_cancels),
            start=self._start,
            skip=self._skip,
        )
        #: Runs' holds on the GC tuning (engine/collector.py), released however close goes.
        self._collector_holds: set[CollectorHold] = set()
        #: OpenTelemetry traces of runs when OTEL_* names a collector (observability/).
        self._tracing = tracing_from_env(os.environ)
        #: Final states the store could not take (a full disk): shown until it can.
        self._unrecorded_ends: dict[str, tuple[str, str]] = {}
        self._spill_dirs = spill_dirs(store.path)
        # Rows an earlier process spilled are stored before any run can be resumed.
        store_spills(self.items, self._spill_dirs)
        self._start_loop()
        self._writer: BatchWriter = self._call(self._start_writer())
        self._closed = False

    # ---- the loop thread -----------------------------------------------------------

    def _start_loop(self) -> None:
        """The engine's event loop, running on a thread of its own from now on."""
        self._loop = asyncio.new_event_loop()
        # The loop's store calls run here, so that `close` can wait for those still running:
        # a store closed after the engine must not find its connection busy with one.
        self._store_calls = concurrent.futures.ThreadPoolExecutor(
            thread_name_prefix="promptlab-store"
        )
        self._loop.set_default_executor(self._store_calls)
        self._thread = threading.Thread(target=self._run_loop, name="promptlab-engine", daemon=True)
        self._thread.start()

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
            self.items,
            spill_dirs=self._spill_dirs,
            on_stall=self._on_stall,
            clock=self.clock,
            answer_log=self.settings.answer_log,
        )
        writer.start()
        return writer

    def flush(self) -> None:
        """Store every answer counted so far (a backup then holds each of them)."""
        self._settle_writer()

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
        """Requests, tokens, cost and time the spec would take (see engine/plan/estimate.py).

        Checks what `submit` checks first (the unit column, the plan's size). The first
        ESTIMATE_ROWS rows are assigned as the run will assign them (a split: by the
        hash of each row's unit, ramp and kill switch included; with
        `skip_invalid_rows`, minus the rows a template refuses) and scale the dataset.
        """
        prepared = self._prepare(spec, sending=False)
        estimate = estimate_run(
            prepared.variants,
            prepared.plan_sample(),
            prepared.endpoints,
            self.reads.output_history(),
            spec.limits,
        )
        tiebreak = spec.crosscheck.tiebreak if spec.crosscheck is not None else None
        if tiebreak is None:
            return estimate
        said = (
            f"crosscheck.tiebreak: {tiebreak.model} is counted for every row, an upper "
            "bound: it answers only the rows the other models doubt"
        )
        return replace(estimate, warnings=(*estimate.warnings, said))

    def adopt_waiting(self) -> list[str]:
        """Take over the runs left waiting by a process that is gone (see dependencies.py)."""
        return self._waiting.adopt(self.resume)

    def status(self, run_id: str) -> RunProgress:
        """Live progress for an active run; stored counts for any other."""
        record = self.runs.get_run(run_id)
        active = self._active.get(run_id)
        status, reason = self._unrecorded_ends.get(run_id, (record.status, record.status_reason))
        common: dict[str, Any] = {
            "run_id": run_id,
            "name": record.name,
            "status": status,
            "reason": reason,
            "submitted_at": record.submitted_at,
            "started_at": record.started_at,
            "finished_at": record.finished_at,
        }
        if active is None or active.counters is None:
            counts = self.reads.item_counts(run_id)
            return RunProgress(
                **common,
                active=active is not None,
                total=record.total_items,
                pending=counts["pending"],
                in_flight=counts["in_flight"],
                succeeded=counts["succeeded"],
                failed=counts["failed"],
                cancelled=counts["cancelled"],
                throughput_per_s=None,
                eta_s=None,
            )
        c = active.counters
        lanes = active.execution.lanes if active.execution else ()
        return RunProgress(
            **common,
            active=True,
            total=c.total,
            pending=c.pending,
            in_flight=c.in_flight,
            succeeded=c.succeeded,
            failed=c.failed,
            cancelled=c.cancelled,
            throughput_per_s=c.throughput(),
            eta_s=c.eta_s(),
            limiters=tuple(lane.limiter.state() for lane in lanes),
        )

    def list_runs(self, limit: int = 50) -> list[RunProgress]:
        return [self.status(r.run_id) for r in self.runs.list_runs(limit)]

    def is_active(self, run_id: str) -> bool:
        return run_id in self._active

    def live_lane(self, endpoint: str) -> LiveLane:
        """The provider and shared limiter of `endpoint` for the live gateway's calls, on
        this engine's loop: live calls and runs on an endpoint draw on one budget."""
        cfg = self._endpoints.get(endpoint)
        if cfg is None:
            known = ", ".join(sorted(self._endpoints))
            raise ConfigError(f"no endpoint named {endpoint!r} (known: {known})")

        async def opened() -> tuple[Provider, EndpointLimiter]:
            return self._pool.live(cfg)

        provider, limiter = self._call(opened())
        return LiveLane(cfg, provider, limiter, self._loop)

    def writer_stats(self) -> WriterStats:
        """The batch writer's commits, their latency, failures and spills (a copy)."""
        return replace(self._writer.stats, bucket_counts=list(self._writer.stats.bucket_counts))

    def chunks_waiting(self) -> dict[str, float] | None:
        """Per worker queue, the age (s) of this engine's oldest chunk no worker has
        answered yet; None when it has sent nothing through workers."""
        return self._pool.chunks_waiting()

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
            if self._tracing is not None:  # export what the runs' spans left pending
                self._tracing.shutdown()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals -----------------------------------------------------------------

    def _prepare(
        self, spec: RunSpec, stored: StoredRun | None = None, *, sending: bool = True
    ) -> PreparedRun:
        """The one prepare-run step (engine/plan/prepare.py) with this engine's endpoints, its
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
                active = ActiveRun(None, None, task, done, cancel_requested=cancelled)
                if cancelled:  # taken while it was claimed: nothing more to record
                    active.cancel_recorded.set()
                self._active[run_id] = active
                self._claims.discard(run_id)
            self._unrecorded_ends.pop(run_id, None)
            task.add_done_callback(lambda _t: self._finish(run_id))
            ready.set()

        ready = threading.Event()
        self._loop.call_soon_threadsafe(launch)
        ready.wait(CALL_TIMEOUT_S)

    async def _shutdown(self) -> None:
        await self._writer.stop()
        await self._pool.aclose()


def new_run_id() -> str:
    """A short, sortable-enough, unique run id."""
    return "run_" + uuid.uuid4().hex[:12]
