"""One run as the Runs page and `promptlab status` show it: `RunView`, read as one snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from promptlab.engine import Engine
from promptlab.engine.send.limiter import LimiterState
from promptlab.providers.batches.ledger import ChunkView
from promptlab.records import (
    FINAL_RUN_STATUSES,
    AlertRecord,
    FailureExample,
    FieldFailure,
    ItemCounts,
    RunRecord,
    RunStatus,
    RunSummary,
    VariantSummary,
)
from promptlab.records.afterrun import AfterRunRecord, failure_lines
from promptlab.store import ReadModels
from promptlab.store.alerts import AlertStore
from promptlab.store.provider_batches import BatchLedgerStore

__all__ = ["FAILURES_SHOWN", "RunView", "read_run_view"]

#: Failed items a run view lists with their messages (the counts cover them all).
FAILURES_SHOWN = 10


@dataclass(frozen=True)
class RunView:
    """One run as the Runs page and `promptlab status` show it, read as one snapshot.

    Counts, totals, per-variant figures and failures all come from the same committed
    state of the store, so they agree; throughput, ETA and limiter state are live
    figures of the engine, present while the run is active.
    """

    run: RunRecord
    status: str
    reason: str | None
    counts: ItemCounts
    summary: RunSummary
    variants: list[VariantSummary]
    failure_kinds: dict[str, int]
    failures: list[FailureExample]
    events: list[tuple[RunStatus, str | None, datetime]]
    #: When the run last started running: later than `run.started_at` after a resume.
    last_started_at: datetime | None
    active: bool = False
    throughput_per_s: float | None = None
    eta_s: float | None = None
    limiters: tuple[LimiterState, ...] = ()
    #: The output paths that fail their check most, per variant (see `field_failures`).
    field_failures: tuple[FieldFailure, ...] = ()
    #: Anomalies seen in the run's results (promptlab.checks.anomalies), oldest items first.
    alerts: tuple[AlertRecord, ...] = ()
    #: What the run's ends set going (promptlab/evaluation/ended.py), each piece's state.
    after_run: tuple[AfterRunRecord, ...] = ()
    #: Its provider batches (`executor: provider-batch`), oldest first: state and counts.
    batches: tuple[ChunkView, ...] = ()

    @property
    def after_run_failures(self) -> list[str]:
        """The after-run work that failed, one line each (empty: none failed)."""
        return failure_lines(self.after_run)

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def total(self) -> int:
        return self.run.total_items

    @property
    def fraction_closed(self) -> float:
        """Share of items with their final row (succeeded, failed or cancelled)."""
        return self.counts.finished / self.total if self.total else 0.0

    @property
    def resumed(self) -> bool:
        started = self.run.started_at
        return started is not None and self.last_started_at not in (None, started)

    @property
    def wall_time_s(self) -> float | None:
        """From the first start to the finish, resumes and the gaps between them included."""
        if self.run.started_at is None or self.run.finished_at is None:
            return None
        return (self.run.finished_at - self.run.started_at).total_seconds()

    @property
    def last_part_s(self) -> float | None:
        """From the last (re)start to the finish."""
        if self.last_started_at is None or self.run.finished_at is None:
            return None
        return (self.run.finished_at - self.last_started_at).total_seconds()

    @property
    def can_cancel(self) -> bool:
        return self.active or self.status not in FINAL_RUN_STATUSES

    @property
    def can_pause(self) -> bool:
        return self.active

    @property
    def can_resume(self) -> bool:
        # A run waiting here starts by itself; one whose owner is gone is taken over.
        waiting_here = self.status == RunStatus.WAITING and not self.run.process_gone
        return not self.active and self.status != RunStatus.COMPLETED and not waiting_here


def read_run_view(
    reads: ReadModels,
    alerts: AlertStore,
    engine: Engine | None,
    run_id: str,
    failures: int = FAILURES_SHOWN,
) -> RunView:
    """Everything shown about one run, from one snapshot of the store; the live figures
    come from `engine` when one is running (None: the stored state alone)."""
    with reads.snapshot() as snapshot:
        run = snapshot.run(run_id)
        counts = snapshot.item_counts_of(run_id)
        summary = snapshot.summary(run_id)
        variants = snapshot.variant_summaries(run_id)
        kinds = snapshot.failure_kinds(run_id)
        examples = snapshot.failure_examples(run_id, failures)
        events = snapshot.events(run_id)
        last_start = snapshot.last_start(run_id)
        fields = snapshot.field_failures(run_id)
    status: str = run.status
    reason = run.status_reason
    live = None
    if engine is not None:
        live = engine.status(run_id)
        # The engine knows an end the store could not record (a full disk).
        status, reason = live.status, live.reason
    return RunView(
        run=run,
        status=status,
        reason=reason,
        counts=counts,
        summary=summary,
        variants=variants,
        failure_kinds=kinds,
        failures=examples,
        events=events,
        last_started_at=last_start,
        active=bool(live and live.active),
        throughput_per_s=live.throughput_per_s if live and live.active else None,
        eta_s=live.eta_s if live and live.active else None,
        limiters=live.limiters if live and live.active else (),
        field_failures=tuple(fields),
        alerts=tuple(alerts.for_run(run_id)),
        batches=tuple(BatchLedgerStore(reads.store).for_run(run_id)),
    )
