"""Verify's walk of one chain: the first event modified, missing or inserted out of
place, and whether the chain still holds each head a ``run.ended`` event recorded. The
chain's rules (what is hashed, how events link) are in promptlab/audit/chain.py; this
is how verify reads a stored chain against them, one event at a time, so a chain of
any length streams through. What verify checks beyond the walk (anchors, the stored
rows) is in promptlab/audit/checks.py."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from promptlab.audit.chain import AuditEvent, hash_of
from promptlab.audit.report import ChainProblem, ChainStatus


def verify_chain(
    chain: str, events: Iterable[AuditEvent], first_prev: str, watch: Collection[int] = ()
) -> tuple[ChainStatus, dict[int, str]]:
    """Walk one chain (events in seq order, ties in stored order) and report the first
    event modified, missing, or inserted out of place; every event is still counted.

    Streams: only the hashes of the seqs in `watch` (the checkpoints' heads) are kept,
    returned beside the status for `check_checkpoints`.
    """
    expected, prev = 1, first_prev
    head_seq, head_hash = 0, first_prev
    seen: dict[int, str] = {}
    count = 0
    problem: ChainProblem | None = None
    for event in events:
        count += 1
        if event.seq in watch:
            seen.setdefault(event.seq, event.hash)
        if problem is not None:
            continue
        problem = _problem(chain, event, expected, prev)
        if problem is None:
            expected, prev = event.seq + 1, event.hash
            head_seq, head_hash = event.seq, event.hash
    return ChainStatus(chain, count, head_seq, head_hash, True, problem), seen


def _problem(chain: str, event: AuditEvent, expected: int, prev: str) -> ChainProblem | None:
    if event.seq < expected:
        return ChainProblem(
            chain,
            event.seq,
            event.event_id,
            "inserted",
            f"a second event with seq {event.seq} (the chain was already at {expected - 1})",
        )
    if event.seq > expected:
        missing = (
            f"seq {expected}" if event.seq == expected + 1 else f"seqs {expected}-{event.seq - 1}"
        )
        return ChainProblem(
            chain, event.seq, event.event_id, "deleted", f"{missing} missing before it"
        )
    if hash_of(event) != event.hash:
        return ChainProblem(
            chain, event.seq, event.event_id, "modified", "its content no longer matches its hash"
        )
    if event.prev_hash != prev:
        return ChainProblem(
            chain,
            event.seq,
            event.event_id,
            "inserted",
            f"it does not follow event seq {event.seq - 1} (prev_hash differs)",
        )
    return None


def check_checkpoints(
    status: ChainStatus, hashes: Mapping[int, str], checkpoints: Iterable[tuple[int, str, str]]
) -> ChainStatus:
    """A whole chain must still hold each head a ``run.ended`` event recorded
    (seq, hash, that event's id): otherwise its last events were deleted. `hashes` maps
    those seqs to the hashes the chain holds at them."""
    if not status.ok:
        return status
    for seq, digest, recorded_by in checkpoints:
        if seq == 0:
            continue
        if hashes.get(seq) != digest:
            problem = ChainProblem(
                status.chain,
                seq,
                recorded_by,
                "deleted",
                f"the chain ends at seq {status.head_seq}, but change event {recorded_by} "
                f"recorded its head at seq {seq}",
            )
            return ChainStatus(
                status.chain,
                status.events,
                status.head_seq,
                status.head_hash,
                status.anchored,
                problem,
            )
    return status
