"""Runs as stored and as the runs pages read them: variants, counts, summaries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from promptlab.records.rates import CheckRates
from promptlab.records.states import RunStatus


@dataclass(frozen=True)
class VariantRecord:
    """A run's variant as stored: enough to rebuild its request without the registry."""

    index: int
    name: str
    prompt_ref: str
    prompt_version_id: str
    endpoint: str
    model: str
    params: Mapping[str, Any]
    template: Mapping[str, Any]


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    name: str
    spec: Mapping[str, Any]
    status: RunStatus
    status_reason: str | None
    total_items: int
    submitted_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    #: The process that last drove it (host:pid:token); None on runs from before owners.
    owner: str | None = None
    #: True for a run not finished whose owning process is gone (read by another one).
    process_gone: bool = False

    @property
    def state(self) -> str:
        """The status as a user should read it: `interrupted (process gone)` for a live
        status nobody drives any more (`promptlab resume RUN_ID` goes on)."""
        return INTERRUPTED if self.process_gone else str(self.status)

    @property
    def resume_command(self) -> str:
        return f"promptlab resume {self.run_id}"


#: What `status`, the Runs page and `wb.runs` show for a run whose process is gone.
INTERRUPTED = "interrupted (process gone)"


@dataclass(frozen=True)
class FailureExample:
    """One failed item: which dataset row (0-based) and variant, and why."""

    row_index: int
    variant: str
    error_kind: str
    message: str


@dataclass(frozen=True)
class RunSummary:
    """Totals over a run's stored rows: tokens, cost and latency of succeeded items."""

    succeeded: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    #: Every request sent, retries included.
    attempts: int
    rate_limited_attempts: int
    #: Items answered from the response cache: never sent, cost 0, no latency.
    cache_hits: int = 0


@dataclass(frozen=True)
class ItemCounts:
    """Items of a run per state."""

    pending: int = 0
    in_flight: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def open(self) -> int:
        return self.pending + self.in_flight

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.cancelled


@dataclass(frozen=True)
class RunWithCounts:
    """A run and its items per state, as the runs list shows it."""

    run: RunRecord
    items: ItemCounts


@dataclass(frozen=True)
class VariantSummary(CheckRates):
    """One variant of a run: where it is, how it went, what it cost.

    Latencies are over succeeded results. `completion_rate` is completed / finished
    (None while nothing has finished), where an item is completed when it succeeded, its
    output check is valid, repaired or no_schema, and no error-severity rule failed. The
    check rates are shares of `checked`, the succeeded results checked against an output
    schema or rules (None when none).
    """

    variant_index: int
    name: str
    prompt_ref: str
    endpoint: str
    model: str
    succeeded: int
    failed: int
    cancelled: int
    open: int
    completion_rate: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p99_ms: float | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    #: Succeeded items that count as complete (valid, repaired or no schema).
    completed: int = 0
    checked: int = 0
    valid: int = 0
    repaired: int = 0
    invalid: int = 0
    truncated: int = 0
    #: Outputs whose rules of severity error failed (or raised), and those with warnings.
    rule_failed: int = 0
    rule_warned: int = 0

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.cancelled


@dataclass(frozen=True)
class FieldFailure:
    """How often one path of the output failed its check, in one variant of a run.

    Array indexes are folded (`$.items[*].price`) so one field is counted once.
    """

    variant: str
    path: str
    #: Outputs with at least one error at this path.
    outputs: int
    #: The most frequent error message at this path.
    example: str


@dataclass(frozen=True)
class OutputHistory:
    """Means over earlier succeeded results of one (version, model), for estimates."""

    results: int
    output_tokens: float
    latency_ms: float
