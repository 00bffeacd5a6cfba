"""What the provider-batch executor writes down before it waits: each chunk, its lines
and its batch id, so a process that dies while its batches run can poll them again and
never sends a chunk twice. The store keeps it (store/provider_batches.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ChunkRecord:
    """A chunk as written down before its submit: whose run, where, and its lines as
    (custom id, item key, attempt)."""

    chunk_id: str
    run_id: str
    endpoint: str
    kind: str
    lines: tuple[tuple[str, str, int], ...]
    created_at: float


@dataclass(frozen=True)
class StoredChunk:
    """A chunk read back: its batch (None while its submit never answered) and state."""

    chunk_id: str
    run_id: str
    batch_id: str | None
    state: str
    created_at: float
    submitted_at: float | None
    lines: tuple[tuple[str, str, int], ...]


@dataclass(frozen=True)
class ChunkView:
    """One batch of a run, as progress shows it."""

    chunk_id: str
    endpoint: str
    batch_id: str | None
    state: str
    lines: int
    succeeded: int
    failed: int
    submitted_at: float | None
    updated_at: float
    expires_at: float | None
    message: str | None


class BatchLedger(Protocol):
    """Where chunks are written down; every call commits before it returns."""

    def begin(self, chunk: ChunkRecord) -> None: ...

    def submitted(
        self, chunk_id: str, batch_id: str, state: str, expires_at: float | None
    ) -> None: ...

    def update(
        self, chunk_id: str, state: str, succeeded: int, failed: int, message: str | None
    ) -> None: ...

    def collected(self, chunk_id: str) -> None: ...

    def open_chunks(self, endpoint: str) -> Sequence[StoredChunk]: ...

    def for_run(self, run_id: str) -> Sequence[ChunkView]: ...
