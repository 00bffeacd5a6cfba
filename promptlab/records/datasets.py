"""Datasets in the store, and rows checked against a template's variables."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Conversation:
    """The columns that make a dataset a conversation log: one row per message."""

    #: The column holding each message's session (a conversation) id.
    session: str
    #: The column ordering a session's messages: a turn number or a timestamp.
    order: str
    #: The column holding `system`, `user` or `assistant`.
    role: str
    #: The column holding the message text.
    content: str

    def columns(self) -> dict[str, str]:
        return {
            "session": self.session,
            "order": self.order,
            "role": self.role,
            "content": self.content,
        }


#: The columns a conversation log is read by unless others are named.
DEFAULT_CONVERSATION = Conversation(
    session="session_id", order="turn", role="role", content="content"
)


@dataclass(frozen=True)
class Turn:
    """One message of a session, as stored: its order value, role, text and row."""

    order: str
    role: str
    content: str
    row_number: int


@dataclass(frozen=True)
class SessionSummary:
    session: str
    messages: int
    user_turns: int
    first: str
    last: str


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
    #: Set for a conversation log (one row per message), None for a table of rows.
    conversation: Conversation | None = None

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
