"""A run's provider batches as lines: each batch's state, counts, how long it has run
and what comes next (`promptlab status`, live progress and the Runs page)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from promptlab.providers.batches.ledger import ChunkView

#: States in which a batch is still being worked on by its provider.
WORKING = frozenset({"submitting", "validating", "in_progress", "finalizing", "cancelling"})


def span(seconds: float) -> str:
    """`12 s`, `12 min` or `2 h 5 min`."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    hours, minutes = int(seconds // 3600), int(seconds % 3600 // 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def batch_line(chunk: ChunkView, now: float) -> str:
    """`batch_abc (openai): in_progress, 40/100 done, 2 failed, for 12 min; expires in 23 h`."""
    name = chunk.batch_id or f"chunk {chunk.chunk_id} (not sent yet)"
    done = chunk.succeeded + chunk.failed
    failed = f", {chunk.failed} failed" if chunk.failed else ""
    state = chunk.state.replace("_", " ")
    line = f"{name} ({chunk.endpoint}): {state}, {done}/{chunk.lines} done{failed}"
    if chunk.state in WORKING and chunk.submitted_at is not None:
        line += f", for {span(now - chunk.submitted_at)}"
        if chunk.expires_at is not None:
            line += (
                f"; expires in {span(chunk.expires_at - now)}, then its unanswered lines are "
                "sent again in a new batch"
            )
    if chunk.message:
        line += f" ({chunk.message})"
    return line


def batch_lines(batches: Sequence[ChunkView], now: float) -> list[str]:
    """One line per batch, and a total when there are several."""
    lines = [batch_line(chunk, now) for chunk in batches]
    if len(batches) > 1:
        states: dict[str, int] = {}
        for chunk in batches:
            states[chunk.state] = states.get(chunk.state, 0) + 1
        said = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in sorted(states.items()))
        lines.append(f"{len(batches)} batches: {said}")
    return lines
