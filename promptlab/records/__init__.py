"""Record types and str enums shared by the store, the engine, the CLI and the pages."""

from __future__ import annotations

from promptlab.errors import ErrorKind
from promptlab.records.datasets import (
    Conversation,
    DatasetInfo,
    RowCheck,
    RowProblem,
    SessionSummary,
    Turn,
)
from promptlab.records.items import (
    AssignmentRecord,
    AttemptRow,
    FinalRow,
    ItemDetail,
    ItemFilter,
    ItemPage,
    ItemRow,
    PendingItem,
    PlannedChunk,
    PlannedItem,
    WriteBatch,
)
from promptlab.records.metrics import (
    AlertRecord,
    LogMetricsRow,
    MetricsRow,
)
from promptlab.records.prompts import (
    LabelEvent,
    PromptVersion,
)
from promptlab.records.rates import (
    CheckRates,
    share,
    version_label,
)
from promptlab.records.runs import (
    FailureExample,
    FieldFailure,
    ItemCounts,
    OutputHistory,
    RunRecord,
    RunSummary,
    RunWithCounts,
    VariantRecord,
    VariantSummary,
)
from promptlab.records.schedules import ScheduleRecord
from promptlab.records.scores import ScoreCounts
from promptlab.records.states import (
    FINAL_ITEM_STATUSES,
    FINAL_RUN_STATUSES,
    OPEN_ITEM_STATUSES,
    ItemErrorKind,
    ItemStatus,
    RunStatus,
)

__all__ = [
    "AlertRecord",
    "AssignmentRecord",
    "AttemptRow",
    "CheckRates",
    "Conversation",
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
    "ItemFilter",
    "ItemPage",
    "ItemRow",
    "ItemStatus",
    "LabelEvent",
    "LogMetricsRow",
    "MetricsRow",
    "OPEN_ITEM_STATUSES",
    "OutputHistory",
    "PendingItem",
    "PlannedChunk",
    "PlannedItem",
    "PromptVersion",
    "RowCheck",
    "RowProblem",
    "RunRecord",
    "RunStatus",
    "RunSummary",
    "RunWithCounts",
    "ScheduleRecord",
    "ScoreCounts",
    "SessionSummary",
    "Turn",
    "VariantRecord",
    "VariantSummary",
    "WriteBatch",
    "share",
    "version_label",
]
