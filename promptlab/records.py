"""Record types and str-valued enums shared by the store, the engine, the CLI and the pages.

The enums are `StrEnum`s: a member is its stored text, so the database and every
comparison with a plain string see exactly what they saw before the enums existed.
Provider error kinds live in `promptlab.errors.ErrorKind` (re-exported here); the
engine's own kinds, for items that never got a provider answer, are `ItemErrorKind`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from promptlab.analysis.stats import Interval, wilson_interval
from promptlab.audit.chain import AuditDraft
from promptlab.errors import ErrorKind
from promptlab.prompts.templates import Template

__all__ = [
    "AttemptRow",
    "DatasetInfo",
    "ErrorKind",
    "FINAL_ITEM_STATUSES",
    "FINAL_RUN_STATUSES",
    "FailureExample",
    "FieldFailure",
    "FinalRow",
    "ItemCounts",
    "ItemDetail",
    "ItemErrorKind",
    "ItemPage",
    "ItemRow",
    "ItemStatus",
    "LabelEvent",
    "LogMetricsRow",
    "MetricsRow",
    "OPEN_ITEM_STATUSES",
    "PairedCompletion",
    "PendingItem",
    "PromptVersion",
    "RowCheck",
    "RowProblem",
    "RunRecord",
    "RunStatus",
    "RunSummary",
    "RunWithCounts",
    "VariantRecord",
    "VariantSummary",
    "WriteBatch",
    "utcnow",
]


def utcnow() -> datetime:
    """The timestamp records carry: timezone-aware UTC."""
    return datetime.now(UTC)


# ---- states and kinds --------------------------------------------------------------


class RunStatus(StrEnum):
    """A run's lifecycle, in order; the last three are final."""

    SUBMITTED = "submitted"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_RUN_STATUSES


FINAL_RUN_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class ItemStatus(StrEnum):
    """An item's state; a final item has exactly one row in `results`."""

    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_ITEM_STATUSES


OPEN_ITEM_STATUSES = (ItemStatus.PENDING, ItemStatus.IN_FLIGHT)
FINAL_ITEM_STATUSES = (ItemStatus.SUCCEEDED, ItemStatus.FAILED, ItemStatus.CANCELLED)


class ItemErrorKind(StrEnum):
    """Why an item failed when no provider answer explains it (those are `ErrorKind`)."""

    #: Its values do not fit the template: never sent.
    INVALID_INPUT = "invalid_input"
    #: An unexpected exception from an adapter: a bug, not a provider answer.
    INTERNAL = "internal"
    #: The store refused its result row every time (the writer set it aside).
    STORE_ERROR = "store_error"


# ---- prompts -------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptVersion:
    prompt_name: str
    id: str
    semver: str
    template: Template
    author: str
    message: str
    created_at: datetime
    parent_id: str | None

    @property
    def short_id(self) -> str:
        """`sha256:` and the first 12 hex digits: enough to tell versions apart."""
        return self.id[:19]

    @property
    def ref(self) -> str:
        return f"{self.prompt_name}@{self.semver}"


@dataclass(frozen=True)
class LabelEvent:
    prompt_name: str
    label: str
    version_id: str
    semver: str
    moved_at: datetime
    actor: str


# ---- runs and their items ------------------------------------------------------------


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


@dataclass(frozen=True)
class PendingItem:
    """One planned item read back for dispatch, with its dataset row."""

    key: str
    seq: int
    row_index: int
    variant_index: int
    repeat: int
    attempts: int
    values: Mapping[str, Any]


@dataclass(frozen=True)
class AttemptRow:
    key: str
    run_id: str
    attempt: int
    started_at: datetime
    ended_at: datetime
    outcome: str  # "ok" or "error"
    error_kind: str | None
    http_status: int | None
    error_message: str | None
    wait_ms: float
    wait_reason: str | None
    retry_after_s: float | None
    latency_ms: float | None
    #: A follow-up turn sent because the output before it failed its check (`reask`).
    reask: bool = False


@dataclass(frozen=True)
class FinalRow:
    """An item's one final row: succeeded, failed with a kind, or cancelled."""

    key: str
    run_id: str
    seq: int
    row_index: int
    variant: str
    repeat: int
    status: str
    prompt_version_id: str
    endpoint: str
    model: str
    params: Mapping[str, Any]
    attempts: int
    finished_at: datetime
    error_kind: str | None = None
    error_message: str | None = None
    output_text: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    model_version: str | None = None
    latency_ms: float | None = None
    cost_usd: float | None = None
    #: The output check of a succeeded result (a promptlab.checks.validation.CheckStatus value);
    #: None on failed items and on results stored before checks existed.
    check_status: str | None = None
    #: Every problem the check found, as `PATH: message`.
    check_errors: tuple[str, ...] = ()
    #: The rules' verdict (a promptlab.checks.rules.RuleStatus value) on a valid or repaired
    #: output of a template with rules; None otherwise.
    rule_status: str | None = None
    #: Every rule that failed or raised, as `RULE: why` (`RULE (warning): why`).
    rule_errors: tuple[str, ...] = ()


@dataclass
class WriteBatch:
    """What the writer commits in one transaction."""

    dispatched: list[str] = field(default_factory=list)
    attempts: list[AttemptRow] = field(default_factory=list)
    finals: list[FinalRow] = field(default_factory=list)
    #: Trace events of these rows (promptlab.audit.chain), chained in the same transaction.
    audit: list[AuditDraft] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.dispatched) + len(self.attempts) + len(self.finals) + len(self.audit)


# ---- read models ---------------------------------------------------------------------


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


def share(count: int, total: int) -> float | None:
    """count / total, or None when there is nothing to divide by."""
    return count / total if total else None


def version_label(name: str | None, semver: str | None, version_id: str) -> str:
    """`name@semver`, or the version id's first 19 characters when it has no name."""
    return f"{name}@{semver}" if name and semver else version_id[:19]


class CheckRates:
    """Output-check rates as shares of the checked outputs (None when none was checked).

    Shared by the records that carry the check counts (VariantSummary, MetricsRow).
    """

    checked: int
    valid: int
    repaired: int
    invalid: int
    truncated: int
    rule_failed: int

    def _share(self, count: int) -> float | None:
        return share(count, self.checked)

    @property
    def validity_rate(self) -> float | None:
        """Valid as written, of the checked outputs."""
        return self._share(self.valid)

    @property
    def repair_rate(self) -> float | None:
        """Fit the schema only once repaired, of the checked outputs."""
        return self._share(self.repaired)

    @property
    def invalid_rate(self) -> float | None:
        return self._share(self.invalid)

    @property
    def truncation_rate(self) -> float | None:
        """Cut off at the token limit, of the checked outputs."""
        return self._share(self.truncated)

    @property
    def rule_failure_rate(self) -> float | None:
        """Failed an error-severity rule, of the checked outputs."""
        return self._share(self.rule_failed)


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
class ItemRow:
    """One item of a run as the items list shows it; result fields are None while open."""

    key: str
    seq: int
    #: 0-based, like the store; people read `row_index + 1`.
    row_index: int
    variant: str
    repeat: int
    status: ItemStatus
    error_kind: str | None
    attempts: int
    latency_ms: float | None
    #: The first OUTPUT_PREVIEW_CHARS characters of the output (succeeded items).
    output_preview: str | None
    finished_at: datetime | None
    #: The output check's status (succeeded items of runs since checks existed).
    check_status: str | None = None


@dataclass(frozen=True)
class ItemPage:
    """A page of a run's items in plan order, and how many items match the filters."""

    rows: list[ItemRow]
    total: int
    offset: int
    limit: int


@dataclass(frozen=True)
class ItemDetail:
    """Everything stored about one item: its row, its variant, its result, its attempts."""

    run_id: str
    key: str
    seq: int
    row_index: int
    repeat: int
    status: ItemStatus
    #: The dataset row as planned (the values the template was rendered with).
    row: Mapping[str, Any]
    variant: VariantRecord
    #: The final row; None while the item is pending or in flight.
    result: FinalRow | None
    #: Every request sent for it, in order (retries and resumes included).
    attempts: list[AttemptRow]


@dataclass(frozen=True)
class PlannedItem:
    """One request a run will make: a row through a variant, the `repeat`-th time."""

    key: str
    seq: int
    row_index: int
    variant_index: int
    repeat: int


@dataclass(frozen=True)
class OutputHistory:
    """Means over earlier succeeded results of one (version, model), for estimates."""

    results: int
    output_tokens: float
    latency_ms: float


@dataclass(frozen=True)
class AssignmentRecord:
    """Which variant an experiment gave one unit (a dataset row's user or session)."""

    experiment: str
    revision: int
    unit_id: str
    row_index: int
    variant: str
    bucket: int
    #: False when the unit is outside the ramp or the experiment is killed (-> control).
    in_experiment: bool


@dataclass(frozen=True)
class PlannedChunk:
    """A slice of a run's plan: the dataset rows it covers, their items and assignments."""

    first_row: int
    rows: list[Mapping[str, Any]]
    items: list[PlannedItem]
    #: The experiment's decisions for these rows (split runs only), recorded with the plan.
    assignments: list[AssignmentRecord] = field(default_factory=list)


# ---- datasets ------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset in the store: where it came from and its shape (rows are apart)."""

    name: str
    #: The file name it was imported from (no folder: the store may move machines).
    source: str
    format: str
    row_count: int
    #: (name, DuckDB type) in file order; CSV columns are all VARCHAR (cells are text).
    columns: tuple[tuple[str, str], ...]
    #: The column that identifies a unit (a user, a customer) for experiments.
    unit_column: str | None
    imported_at: datetime
    author: str

    @property
    def column_names(self) -> list[str]:
        return [name for name, _type in self.columns]


@dataclass(frozen=True)
class RowProblem:
    """One thing wrong with one dataset row for a template: its row (1-based) and column."""

    row_number: int
    column: str
    problem: str

    def __str__(self) -> str:
        return f"row {self.row_number}, column {self.column}: {self.problem}"


@dataclass(frozen=True)
class RowCheck:
    """Rows checked against a template's variables: every bad row, the first problems."""

    total: int
    valid: int
    #: The first problems found, in row order (a bad row may have several).
    problems: list[RowProblem]
    #: Every bad row number, so a run can be planned on the valid rows only.
    bad_rows: frozenset[int]

    @property
    def bad(self) -> int:
        return self.total - self.valid


# ---- metrics and comparisons ---------------------------------------------------------


@dataclass(frozen=True)
class MetricsRow(CheckRates):
    """What one run variant, or one prompt version on one model, added up to.

    Run rows have `run_id` and `variant`; version rows (across runs) have neither and
    count the `runs` they come from. Counts are over final rows (results); latencies
    over succeeded ones. `completed` counts succeeded results whose output passed its
    check (valid, repaired or no schema) once results carry checks.
    """

    run_id: str | None
    variant: str | None
    prompt_name: str | None
    prompt_version: str | None
    prompt_version_id: str
    model: str
    runs: int
    finished: int
    succeeded: int
    failed: int
    cancelled: int
    #: Items of a run variant still pending or in flight (0 for version rows).
    open: int
    completed: int
    failed_by_kind: Mapping[str, int]
    latency_mean_ms: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    first_finished_at: datetime | None
    last_finished_at: datetime | None
    #: Succeeded results checked against an output schema or rules, and how their
    #: checks came out (the same counts as VariantSummary's; 0 before output checks).
    checked: int = 0
    valid: int = 0
    repaired: int = 0
    invalid: int = 0
    truncated: int = 0
    #: Checked outputs whose rules of severity error failed (or raised).
    rule_failed: int = 0
    #: Feedback (promptlab.data.feedback): impressions, and clicks counted at most once per
    #: impression of the same result (or unit); thumbs as given.
    impressions: int = 0
    clicks: int = 0
    thumbs_up: int = 0
    thumbs_down: int = 0

    @property
    def ctr(self) -> float | None:
        """Click-through rate: clicks over impressions (None with no impression)."""
        return share(self.clicks, self.impressions)

    @property
    def ctr_interval(self) -> Interval:
        """Wilson 95% interval of the CTR ((0, 1) with no impression)."""
        return wilson_interval(self.clicks, self.impressions)

    @property
    def completion_rate(self) -> float | None:
        return share(self.completed, self.finished)

    @property
    def completion_interval(self) -> Interval:
        """Wilson 95% interval of the completion rate ((0, 1) with nothing finished)."""
        return wilson_interval(self.completed, self.finished)

    @property
    def label(self) -> str:
        """The variant, or `name@version` for a version row."""
        if self.variant is not None:
            return self.variant
        return version_label(self.prompt_name, self.prompt_version, self.prompt_version_id)


@dataclass(frozen=True)
class LogMetricsRow:
    """What one prompt version's production requests (imported logs) added up to.

    Rates are over the requests that say: completion over those with `completed` set,
    CTR (clicks over requests) over those with `clicked` set; latencies over those
    with a latency.
    """

    prompt_name: str | None
    prompt_version: str | None
    prompt_version_id: str
    requests: int
    latency_mean_ms: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    #: Requests whose log says whether they completed, and how many did.
    completion_known: int
    completed: int
    #: Requests whose log says whether they were clicked, and how many were.
    click_known: int
    clicks: int
    first_event_at: datetime | None
    last_event_at: datetime | None

    @property
    def completion_rate(self) -> float | None:
        return share(self.completed, self.completion_known)

    @property
    def completion_interval(self) -> Interval:
        return wilson_interval(self.completed, self.completion_known)

    @property
    def ctr(self) -> float | None:
        return share(self.clicks, self.click_known)

    @property
    def ctr_interval(self) -> Interval:
        return wilson_interval(self.clicks, self.click_known)

    @property
    def label(self) -> str:
        return version_label(self.prompt_name, self.prompt_version, self.prompt_version_id)


@dataclass(frozen=True)
class PairedCompletion:
    """Completion of two variants over the same (row, repeat) pairs of an all-mode run."""

    pairs: int
    a_completed: int
    b_completed: int
    #: Pairs only A completed (McNemar's b) and only B completed (c).
    only_a: int
    only_b: int


@dataclass(frozen=True)
class AlertRecord:
    """An anomaly seen in a run's results (promptlab.checks.anomalies): what, where, the figures."""

    run_id: str
    variant: str
    #: A promptlab.checks.anomalies.AlertKind value.
    kind: str
    #: One line: the variant, what was seen with its figures, the items it spans.
    message: str
    first_seq: int
    last_seq: int
    raised_at: datetime
