"""The engine: one per process, on its own event-loop thread, shared by every run.

The CLI and the app both call `submit`, `status`, `cancel`, `resume` and `wait` from
their own threads; all provider calls happen on the engine's loop, so async clients
are never bound to a loop that has closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import itertools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from promptlab.audit.chain import RUN_SUBMITTED, Masker, run_chain
from promptlab.audit.redact import redact, watch_env
from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.config import Settings
from promptlab.data.batchfile import check_request_file
from promptlab.data.datasets import DatasetStore, check_rows
from promptlab.engine.collector import CollectorHold
from promptlab.engine.estimate import RunEstimate, estimate_run
from promptlab.engine.limiter import EndpointLimiter, Limiter, Limits, RunCappedLimiter
from promptlab.engine.planner import (
    AllVariants,
    AssignmentStrategy,
    SkipRows,
    StickySplit,
    plan_items,
    unit_id_of,
)
from promptlab.engine.progress import Counters, RunProgress
from promptlab.engine.retry import STOP_KINDS
from promptlab.engine.run import RunExecution, lanes_for
from promptlab.engine.spec import (
    AS_WRITTEN,
    RunSpec,
    VersionResolver,
    check_dataset,
    check_limits,
    check_plan_size,
    iter_rows,
    merge_endpoints,
    parse_spec,
    resolve_variants,
    used_rows,
)
from promptlab.engine.spill import spill_dirs, store_spills
from promptlab.engine.writer import STORE_UNWRITABLE, BatchWriter
from promptlab.errors import ConfigError, EngineError, PromptlabError, SpecError, StoreError
from promptlab.prompts.templates import Template
from promptlab.providers import build_provider, load_endpoints
from promptlab.providers.base import Provider
from promptlab.providers.config import EndpointConfig
from promptlab.records import (
    FINAL_RUN_STATUSES,
    AlertRecord,
    ItemErrorKind,
    RunStatus,
    VariantRecord,
)
from promptlab.store import ItemStore, ReadModels, RunStore, Store
from promptlab.store.alerts import AlertStore
from promptlab.store.audit import AuditLog
from promptlab.store.connection import is_storage_failure

log = logging.getLogger(__name__)
T = TypeVar("T")

ProviderFactory = Callable[[EndpointConfig], Provider]
#: Rows an estimate reads to count requests per variant (scaled to the whole dataset).
ESTIMATE_ROWS = 20_000
#: Rows rendered to average the prompt tokens of each variant.
TOKEN_SAMPLE_ROWS = 50
#: Seconds a caller thread waits for the engine loop to answer a quick question.
CALL_TIMEOUT_S = 30.0


@dataclass
class _Active:
    execution: RunExecution | None
    counters: Counters | None
    task: asyncio.Task[None]
    done: threading.Event
    cancel_requested: bool = False


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
        clock: Clock = SYSTEM_CLOCK,
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
        self._provider_factory = provider_factory
        self._registry = registry
        self.clock = clock
        self._providers: dict[tuple[str, ...], Provider] = {}
        self._limiters: dict[tuple[str, ...], EndpointLimiter] = {}
        self._active: dict[str, _Active] = {}
        self._claims: set[str] = set()  # runs being resumed, not yet in _active
        #: Cancels that came while their run was being resumed: applied once it starts.
        self._pending_cancels: set[str] = set()
        self._claims_lock = threading.Lock()
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
        writer = BatchWriter(self.items, spill_dirs=self._spill_dirs, on_stall=self._on_stall)
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
        endpoints = merge_endpoints(self._endpoints, spec.endpoints)
        check_limits(spec.limits, endpoints)
        variants = resolve_variants(spec, endpoints, self._get_registry())
        rows = self._row_count(spec)
        check_plan_size(spec, rows, self.settings.max_items)
        for variant in spec.variants:
            if variant.as_written:  # every line a request that can be sent, ids unique
                if spec.dataset is None:
                    raise SpecError("requests sent as written are read from a JSONL file")
                check_request_file(spec.dataset, variant.id_field)
        if spec.split:  # every row has a unit to assign, before the run exists
            self._check_units(spec)
        self._call(self._prepare_lanes(variants, endpoints))
        run_id = new_run_id()
        self.runs.create_run(run_id, spec.name, spec.raw, variants)
        # Before the run's first trace event: its chain is anchored on this event.
        self._audit_change(
            RUN_SUBMITTED,
            run_id,
            {
                "chain": run_chain(run_id),
                "name": spec.name,
                "variants": [
                    {"name": v.name, "version_id": v.prompt_version_id, "model": v.model}
                    for v in variants
                ],
                "experiment": (spec.experiment or {}).get("name"),
            },
        )
        self._start(run_id, spec, variants, endpoints, plan_rows=used_rows(spec, rows))
        return run_id

    def estimate(self, spec: RunSpec) -> RunEstimate:
        """Requests, tokens, cost and time the spec would take (see engine/estimate.py).

        Checks what `submit` checks first (the unit column, the plan's size). A split's
        requests per variant are its expected share of units (ramp and kill switch
        included); with `skip_invalid_rows`, the share of valid rows among the first
        ESTIMATE_ROWS scales the dataset.
        """
        endpoints = merge_endpoints(self._endpoints, spec.endpoints)
        check_limits(spec.limits, endpoints)
        variants = resolve_variants(spec, endpoints, self._get_registry())
        rows = self._row_count(spec)
        check_plan_size(spec, rows, self.settings.max_items)
        if spec.split:
            self._check_unit_column(spec)
        used = min(rows, spec.limit_rows) if spec.limit_rows is not None else rows
        sample = list(itertools.islice(self._rows(spec), TOKEN_SAMPLE_ROWS))
        if spec.skip_invalid_rows and used:
            strategy = self._plan_strategy(spec, variants, min(used, ESTIMATE_ROWS))
            skipped = len(strategy.skipped) if isinstance(strategy, SkipRows) else 0
            used = round(used * (1 - skipped / min(used, ESTIMATE_ROWS)))
        if spec.split and spec.experiment is not None:
            from promptlab.experiments.config import config_from_mapping, expected_shares

            shares = expected_shares(config_from_mapping(spec.experiment))
        else:
            shares = {v.name: 1.0 for v in variants}
        requests = {v.name: round(used * shares.get(v.name, 0.0)) * spec.repeats for v in variants}
        return estimate_run(variants, requests, sample, endpoints, self.reads.output_history())

    def resume(self, run_id: str) -> str:
        """Continue a run whose process died, or that was cancelled or stopped."""
        # Two sessions may press Resume at once: claim the run before looking at it, so
        # only one of them starts it (two would send every open item twice).
        with self._claims_lock:
            if run_id in self._active or run_id in self._claims:
                raise EngineError(f"run {run_id} is already running")
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
        spec = parse_spec(record.spec)
        endpoints = merge_endpoints(self._endpoints, spec.endpoints)
        variants = self.runs.variants(run_id)
        missing = sorted({v.endpoint for v in variants} - set(endpoints))
        if missing:
            raise ConfigError(f"run {run_id} uses unknown endpoint(s): {', '.join(missing)}")
        self._call(self._prepare_lanes(variants, endpoints))
        # A run whose planning never finished (it is scheduled once every item is planned:
        # the process died, or a chunk failed) is planned again from scratch.
        replan = record.scheduled_at is None
        plan_rows = None
        if replan:
            # The dataset may have changed since: the plan's ceiling holds again.
            rows = self._row_count(spec)
            check_plan_size(spec, rows, self.settings.max_items)
            plan_rows = used_rows(spec, rows)
            self.items.clear_plan(run_id)
        else:
            reopened = self.items.reopen(
                run_id, [*(k.value for k in STOP_KINDS), ItemErrorKind.INTERNAL]
            )
            log.info("run %s: %d items back to pending", run_id, reopened)
        self._audit_change("run.resumed", run_id, {"chain": run_chain(run_id), "replan": replan})
        self._start(run_id, spec, variants, endpoints, plan_rows=plan_rows)
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
        if active is not None:
            self._audit_change("run.cancelled", run_id, {"active": True})
            self._loop.call_soon_threadsafe(self._cancel_on_loop, run_id)
            return
        self._settle_writer()
        record = self.runs.get_run(run_id)
        if record.status in FINAL_RUN_STATUSES:
            return
        self.items.cancel_open_items(run_id, "run cancelled")
        self.runs.set_status(run_id, RunStatus.CANCELLED, "cancelled")
        self._audit_change("run.cancelled", run_id, {"active": False})
        self._audit_end(run_id, RunStatus.CANCELLED, "cancelled")

    def status(self, run_id: str) -> RunProgress:
        """Live progress for an active run; stored counts for any other."""
        record = self.runs.get_run(run_id)
        active = self._active.get(run_id)
        status, reason = self._unrecorded_ends.get(run_id, (record.status, record.status_reason))
        if active is None or active.counters is None:
            counts = self.reads.item_counts(run_id)
            return RunProgress(
                run_id=run_id,
                name=record.name,
                status=status,
                reason=reason,
                active=active is not None,
                total=record.total_items,
                pending=counts["pending"],
                in_flight=counts["in_flight"],
                succeeded=counts["succeeded"],
                failed=counts["failed"],
                cancelled=counts["cancelled"],
                throughput_per_s=None,
                eta_s=None,
                submitted_at=record.submitted_at,
                started_at=record.started_at,
                finished_at=record.finished_at,
            )
        c = active.counters
        limiters = (
            tuple(lane.limiter.state() for lane in active.execution.lanes)
            if (active.execution)
            else ()
        )
        return RunProgress(
            run_id=run_id,
            name=record.name,
            status=status,
            reason=reason,
            active=True,
            total=c.total,
            pending=c.pending,
            in_flight=c.in_flight,
            succeeded=c.succeeded,
            failed=c.failed,
            cancelled=c.cancelled,
            throughput_per_s=c.throughput(),
            eta_s=c.eta_s(),
            submitted_at=record.submitted_at,
            started_at=record.started_at,
            finished_at=record.finished_at,
            limiters=limiters,
        )

    def list_runs(self, limit: int = 50) -> list[RunProgress]:
        return [self.status(r.run_id) for r in self.runs.list_runs(limit)]

    def is_active(self, run_id: str) -> bool:
        return run_id in self._active

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
            self.audit_log.record_change(kind, self.settings.author, payload, run_id=run_id)

    def _audit_end(self, run_id: str, status: str, reason: str | None) -> None:
        if self.settings.audit:
            self.audit_log.record_run_end(
                run_id, self.settings.author, {"status": str(status), "reason": reason}
            )

    def _row_count(self, spec: RunSpec) -> int:
        """The dataset's rows, checked readable (a file) or known (an imported dataset)."""
        if spec.dataset is not None:
            return check_dataset(spec.dataset)
        return DatasetStore(self.store).get(str(spec.dataset_name)).row_count

    def _plan_strategy(
        self, spec: RunSpec, variants: list[VariantRecord], rows: int | None = None
    ) -> AssignmentStrategy:
        """The run's assignment; with `skip_invalid_rows`, minus rows a template refuses.

        The check reads the dataset once more (up to `rows` rows) and renders each row
        with every variant's template, the way the run would.
        """
        strategy = _strategy(spec, [v.name for v in variants])
        if not spec.skip_invalid_rows:
            return strategy
        skipped: set[int] = set()
        for variant in variants:
            if variant.template.get(AS_WRITTEN):
                continue
            template = Template.from_canonical(variant.template)
            sample = (dict(row) for row in itertools.islice(self._rows(spec), rows))
            found = check_rows(sample, template, listed=0)
            skipped.update(number - 1 for number in found.bad_rows)
        return SkipRows(strategy, frozenset(skipped))

    def _check_units(self, spec: RunSpec) -> None:
        """The unit column exists and every row has a unit id (SpecError naming the row)."""
        self._check_unit_column(spec)
        column = str(spec.unit_column)
        if spec.dataset_name is not None:  # one query in DuckDB, not a pass in Python
            row = DatasetStore(self.store).first_row_without(
                spec.dataset_name, column, spec.limit_rows
            )
            if row is not None:
                raise SpecError(f"dataset row {row}: no unit id in column {column!r}")
            return
        for row_index, values in enumerate(self._rows(spec)):
            unit_id_of(values, column, row_index)

    def _check_unit_column(self, spec: RunSpec) -> None:
        column = str(spec.unit_column)
        if spec.dataset_name is not None:
            columns = DatasetStore(self.store).get(spec.dataset_name).column_names
        else:
            first = next(iter(iter_rows(spec.dataset, 1)), {}) if spec.dataset else {}
            columns = list(first)
        if column not in columns:
            raise SpecError(
                f"unit_column: {spec.dataset_label} has no column {column!r} "
                f"(columns: {', '.join(columns)})"
            )

    def _rows(self, spec: RunSpec) -> Iterator[Mapping[str, Any]]:
        if spec.dataset is not None:
            return iter_rows(spec.dataset, spec.limit_rows)
        return DatasetStore(self.store).iter_rows(str(spec.dataset_name), spec.limit_rows)

    def _get_registry(self) -> VersionResolver:
        if self._registry is None:
            from promptlab.prompts.registry import Registry

            self._registry = Registry(self.store)
        return self._registry

    async def _prepare_lanes(
        self,
        variants: list[VariantRecord],
        endpoints: Mapping[str, EndpointConfig],
    ) -> None:
        """Build (or reuse) each endpoint's provider and shared limiter on the loop thread."""
        for name in {v.endpoint for v in variants}:
            cfg = endpoints[name]
            key = _budget_key(cfg)
            if key not in self._providers:
                self._providers[key] = self._provider_factory(cfg)
            # The shared budget of an endpoint + key is what the providers file (or the
            # server's headers) says; a spec's limits cap only its own run (see _drive).
            if key not in self._limiters:
                self._limiters[key] = EndpointLimiter(
                    name,
                    Limits(rpm=cfg.rpm, tpm=cfg.tpm, concurrency=cfg.concurrency),
                    clock=self.clock.monotonic,
                )

    def _lane_limiter(self, cfg: EndpointConfig, spec: RunSpec) -> Limiter:
        """The shared limiter of the endpoint, inside the run's own cap when it has one."""
        shared = self._limiters[_budget_key(cfg)]
        cap = spec.limits.get(cfg.name)
        return shared if cap is None else RunCappedLimiter(shared, cap)

    def _start(
        self,
        run_id: str,
        spec: RunSpec,
        variants: list[VariantRecord],
        endpoints: Mapping[str, EndpointConfig],
        *,
        plan_rows: int | None,
    ) -> None:
        """Start the run on the loop; `plan_rows`: the dataset rows to plan it from
        (counted when it was submitted), None when its items are already planned."""
        done = threading.Event()

        def launch() -> None:
            task = self._loop.create_task(
                self._tuned(self._drive(run_id, spec, variants, endpoints, plan_rows)),
                name=f"run-{run_id}",
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

    def _cancel_on_loop(self, run_id: str) -> None:
        active = self._active.get(run_id)
        if active is None:
            return
        active.cancel_requested = True
        if active.execution is not None:
            active.execution.cancel()

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

    async def _drive(
        self,
        run_id: str,
        spec: RunSpec,
        variants: list[VariantRecord],
        endpoints: Mapping[str, EndpointConfig],
        plan_rows: int | None,
    ) -> None:
        active = self._active[run_id]
        try:
            if plan_rows is not None:
                names = [v.name for v in variants]
                strategy = await asyncio.to_thread(self._plan_strategy, spec, variants)
                chunks = plan_items(run_id, self._rows(spec), names, strategy, spec.repeats)
                await asyncio.to_thread(self.items.plan_items, run_id, chunks)
            rows = await asyncio.to_thread(self.items.row_count, run_id)
            # The file is read again to plan: one rewritten since it was counted would plan
            # other rows (none, half-written), and the run would "complete". Not scheduled
            # yet, a resume plans it again.
            if plan_rows is not None and rows != plan_rows:
                raise SpecError(
                    f"dataset {spec.dataset or spec.dataset_name}: changed while the run was "
                    f"being planned ({plan_rows} rows when it was submitted, {rows} read to "
                    "plan it); nothing was sent: resume the run to plan it again"
                )
            await asyncio.to_thread(self.runs.set_status, run_id, RunStatus.SCHEDULED)
            record = await asyncio.to_thread(self.runs.get_run, run_id)
            counts = await asyncio.to_thread(self.reads.item_counts, run_id)
            counters = Counters(counts, record.total_items, self.clock)
            lanes = lanes_for(
                variants,
                endpoints,
                {v.endpoint: self._providers[_budget_key(endpoints[v.endpoint])] for v in variants},
                {v.endpoint: self._lane_limiter(endpoints[v.endpoint], spec) for v in variants},
            )
            alert_writes: list[asyncio.Task[None]] = []

            def store_alerts(alerts: list[AlertRecord]) -> None:
                alert_writes.append(asyncio.create_task(self._store_alerts(run_id, alerts)))

            execution = RunExecution(
                run_id, variants, lanes, spec.retry, self.items, self._writer, counters,
                self.clock, repeats=spec.repeats, rows=rows, alert_sink=store_alerts,
                reask=spec.reask, audit=self.settings.audit,
                masker=Masker(self.settings.mask) if self.settings.mask else None,
            )  # fmt: skip
            active.execution, active.counters = execution, counters
            if active.cancel_requested:
                execution.cancel()
            await asyncio.to_thread(self.runs.set_status, run_id, RunStatus.RUNNING)
            await execution.execute()
            await asyncio.gather(*alert_writes)
            await self._close_run(run_id, execution)
        except Exception as exc:
            if isinstance(exc, PromptlabError):  # an explained failure: its message says it all
                log.error("run %s failed: %s", run_id, exc)
            elif is_storage_failure(exc):
                log.error("run %s failed: %s: %s", run_id, STORE_UNWRITABLE, exc)
            else:
                log.exception("run %s failed", run_id)
            reason = str(exc)
            if is_storage_failure(exc):
                reason = f"{STORE_UNWRITABLE}: {exc}"
            await self._end_run(run_id, RunStatus.FAILED, reason, f"run failed: {reason}")

    async def _store_alerts(self, run_id: str, alerts: list[AlertRecord]) -> None:
        """A small insert off the loop; an alert the store cannot take is only logged
        (`Workbench.detect_anomalies` recomputes every alert from the stored results)."""
        try:
            await asyncio.to_thread(self.alerts.add, alerts)
        except Exception as exc:  # noqa: BLE001 - an alert must never fail the run
            log.warning("run %s: alerts not stored: %s", run_id, exc)
        for alert in alerts:
            log.warning("run %s: alert: %s", run_id, alert.message)

    async def _close_run(self, run_id: str, execution: RunExecution) -> None:
        if execution.stop_reason is not None:
            reason = f"stopped: {execution.stop_reason}"
            await self._end_run(run_id, RunStatus.FAILED, reason, reason)
        elif execution.cancelled:
            await self._end_run(run_id, RunStatus.CANCELLED, "cancelled", "run cancelled")
        else:
            counts = await asyncio.to_thread(self.reads.item_counts, run_id)
            left = counts["pending"] + counts["in_flight"]
            if left:
                # Should not happen: say so rather than call the run complete.
                reason = f"{left} items were left unfinished"
                await self._end_run(run_id, RunStatus.FAILED, reason, None)
            else:
                await self._end_run(run_id, RunStatus.COMPLETED, None, None)

    async def _end_run(
        self, run_id: str, status: RunStatus, reason: str | None, cancel_reason: str | None
    ) -> None:
        """Record how the run ended; when the store cannot take it, remember it in memory.

        Open items get `cancelled` rows only once every answer held is stored: a held
        answer must land as the item's final row, not be shadowed by a cancellation.
        """
        flushed = await self._writer.flush()
        try:
            if cancel_reason is not None and flushed:
                await asyncio.to_thread(self.items.cancel_open_items, run_id, cancel_reason)
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
        for provider in self._providers.values():
            try:
                await provider.aclose()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.warning("closing a provider failed", exc_info=True)


def _strategy(spec: RunSpec, names: list[str]) -> AssignmentStrategy:
    """Every row through every variant, or (a split) each unit's one variant."""
    if not spec.split or spec.experiment is None:
        return AllVariants(len(names))
    from promptlab.experiments.config import assign, config_from_mapping

    config = config_from_mapping(spec.experiment)

    def assigner(unit_id: str) -> tuple[str, int, bool]:
        decided = assign(config, unit_id)
        return decided.variant, decided.bucket, decided.in_experiment

    return StickySplit(config.name, config.revision, assigner, str(spec.unit_column), names)


def new_run_id() -> str:
    """A short, sortable-enough, unique run id."""
    return "run_" + uuid.uuid4().hex[:12]


def _budget_key(cfg: EndpointConfig) -> tuple[str, ...]:
    """Endpoint + key identity: runs on the same endpoint and key share one budget.

    The key itself is hashed in memory only; it is never stored or logged.
    """
    key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
    fingerprint = hashlib.sha256(key.encode()).hexdigest()[:16] if key else ""
    return (cfg.name, cfg.kind, cfg.base_url or "", fingerprint)
