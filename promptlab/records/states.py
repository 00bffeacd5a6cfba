"""Run and item states and error kinds, as str-valued enums.

The enums are `StrEnum`s: a member is its stored text, so the database and every
comparison with a plain string see exactly what they saw before the enums existed.
Provider error kinds live in `promptlab.errors.ErrorKind` (re-exported by
`promptlab.records`); the engine's own kinds, for items that never got a provider
answer, are `ItemErrorKind`.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """A run's lifecycle, in order; the last three are final. A run with `after:` waits
    (WAITING) until the runs it comes after have completed; a PAUSED run sends nothing
    until it is resumed (its pending items stay pending)."""

    SUBMITTED = "submitted"
    WAITING = "waiting"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_RUN_STATUSES


FINAL_RUN_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})

_S = RunStatus
#: A run's lifecycle in one table: each state and the states it may move to. The store
#: moves a run only along it, the state left checked in the same statement
#: (RunStore.set_status). A run whose process died keeps the state it had (running,
#: scheduled): a resume starts it again from there, a cancel closes it. Only a stopped
#: run (failed, cancelled) starts again; a completed one never moves.
RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    _S.SUBMITTED: frozenset({_S.WAITING, _S.SCHEDULED, _S.CANCELLED, _S.FAILED}),
    _S.WAITING: frozenset({_S.WAITING, _S.SCHEDULED, _S.CANCELLED, _S.FAILED}),
    _S.SCHEDULED: frozenset({_S.SCHEDULED, _S.WAITING, _S.RUNNING, _S.CANCELLED, _S.FAILED}),
    _S.RUNNING: frozenset(
        {_S.SCHEDULED, _S.WAITING, _S.PAUSED, _S.COMPLETED, _S.CANCELLED, _S.FAILED}
    ),
    _S.PAUSED: frozenset({_S.SCHEDULED, _S.WAITING, _S.CANCELLED, _S.FAILED}),
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset({_S.SCHEDULED, _S.WAITING}),
    _S.CANCELLED: frozenset({_S.SCHEDULED, _S.WAITING}),
}


def run_sources(status: RunStatus) -> tuple[RunStatus, ...]:
    """The states a run may move to `status` from."""
    return tuple(s for s, targets in RUN_TRANSITIONS.items() if status in targets)


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
    #: An answer longer than a result row holds (engine/record/spill.py MAX_OUTPUT_CHARS): kept
    #: in a file, its path in the error.
    TOO_LARGE = "too_large"
    #: A replayed turn sent with the model's own history (`history: generated`) whose
    #: session has an earlier turn without an answer: never sent.
    NO_HISTORY = "no_history"
    #: A replayed turn whose context shard carries a summary that could not be made
    #: (the summary call failed): never sent.
    NO_SUMMARY = "no_summary"


#: Failed items a resume sends again besides those of a run-stopping error: an adapter
#: bug's, and replayed turns that failed for want of another item (the turn before,
#: a summary), which a resume may now have.
RESUMED_KINDS = (ItemErrorKind.INTERNAL, ItemErrorKind.NO_HISTORY, ItemErrorKind.NO_SUMMARY)
