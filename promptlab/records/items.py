"""Items of a run: planned, dispatched, attempted, finished, and as pages read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from promptlab.audit.chain import AuditDraft
from promptlab.records.runs import VariantRecord
from promptlab.records.states import ItemStatus


@dataclass(frozen=True)
class PlannedItem:
    """One request a run will make: a row through a variant, the `repeat`-th time."""

    key: str
    seq: int
    row_index: int
    variant_index: int
    repeat: int


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
    #: The output's mean token entropy, when log-probabilities were asked and given.
    token_entropy: float | None = None
    #: The context shard a replayed turn was sent with (conversations/shards.py), when its
    #: history had to be cut to fit the model's window.
    shard_id: str | None = None
    #: The mean log-probability of the output's chosen tokens and how many tokens it is
    #: over, when the endpoint gave them: the run's perplexity (analysis/repeats.py).
    logprob_mean: float | None = None
    logprob_tokens: int | None = None
    #: Answered from the response cache (promptlab/engine/send/cache.py): not sent, cost 0,
    #: no latency of its own (so latency statistics leave it out).
    cache_hit: bool = False


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
class ItemFilter:
    """Which of a run's items a view keeps (None: any), as the Runs page's filters set
    them: the items list (`ReadModels.items`) and its downloads (`wb.exports`) read the
    same items with it."""

    status: str | None = None
    variant: str | None = None
    error_kind: str | None = None
    #: The output check's status (promptlab.checks.validation.CheckStatus).
    check: str | None = None
    #: A key prefix, or text (any case) in the dataset row, the output or the error.
    search: str | None = None

    def named(self) -> list[tuple[str, str]]:
        """The filters set, as (name a person reads, value), in the page's order."""
        pairs = (
            ("status", self.status),
            ("variant", self.variant),
            ("error kind", self.error_kind),
            ("check", self.check),
            ("search", self.search),
        )
        return [(name, str(value)) for name, value in pairs if value]

    def describe(self) -> str:
        """`variant v20, status failed`; '' when nothing is filtered."""
        return ", ".join(
            f'{name} "{value}"' if name == "search" else f"{name} {value}"
            for name, value in self.named()
        )


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
