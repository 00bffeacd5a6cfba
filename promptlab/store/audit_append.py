"""Appending chained events to the audit trail inside the caller's transaction, and
moving each chain's anchor to its new head in the same one."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import duckdb

from promptlab.audit.chain import (
    CHANGES_CHAIN,
    RUN_SUBMITTED,
    AuditDraft,
    chain_drafts,
    genesis_hash,
)
from promptlab.audit.redact import Redactor


def append_events(
    tx: duckdb.DuckDBPyConnection,
    drafts: Sequence[AuditDraft],
    clean: Callable[[str], str] | None = None,
    known: Mapping[str, tuple[int, str]] | None = None,
) -> dict[str, tuple[int, str]]:
    """Chain and insert `drafts` inside the caller's transaction; return the new heads.

    Heads not in `known` (what the caller last committed) are read in the same
    transaction, so a batch continues from the last event that was stored, whatever a
    crash dropped before it.
    """
    if not drafts:
        return {}
    chains = sorted({d.chain for d in drafts})
    heads = {c: known[c] for c in chains if known is not None and c in known}
    unknown = [c for c in chains if c not in heads]
    if unknown:
        for chain, seq, digest in tx.execute(
            "SELECT chain, max(seq), arg_max(hash, seq) FROM audit_events "
            "WHERE list_contains(?, chain) GROUP BY chain",
            [unknown],
        ).fetchall():
            heads[chain] = (int(seq), str(digest))
    for chain in unknown:
        if chain not in heads:
            heads[chain] = (0, _anchor(tx, chain))
    suspect = clean.suspects if isinstance(clean, Redactor) else None
    chained = chain_drafts(drafts, heads, clean, suspect)
    import pyarrow as pa

    text = pa.string()
    table = pa.table(
        {
            "chain": pa.array(chained.chain, text),
            "seq": pa.array(chained.seq, pa.int64()),
            "event_id": pa.array(chained.event_id, text),
            "trace_id": pa.array(chained.trace_id, text),
            "run_id": pa.array(chained.run_id, text),
            "kind": pa.array(chained.kind, text),
            "actor": pa.array(chained.actor, text),
            "at": pa.array(chained.at_us, pa.timestamp("us", tz="UTC")),
            "payload": pa.array(chained.payload, text),
            "prev_hash": pa.array(chained.prev_hash, text),
            "hash": pa.array(chained.hash, text),
        }
    )
    # A relation's insert, not register + INSERT + unregister: about 2 µs less per
    # event at the engine's ceiling (DuckDB spends milliseconds per statement). The
    # table's columns are in the stored order (EVENT_COLUMNS, audit_filter.py).
    tx.from_arrow(table).insert_into("audit_events")
    heads = chained.heads()
    _move_anchors(tx, heads)
    return heads


def _move_anchors(tx: duckdb.DuckDBPyConnection, heads: Mapping[str, tuple[int, str]]) -> None:
    """Set each chain's anchor to its new head, in the transaction that stored it.

    One scalar UPDATE per chain (a batch holds one per run it writes), and an INSERT
    for a chain's first events only: measured here, an UPDATE costs 0.55 ms, one over
    unnested lists 1.1 ms and an upsert 1.5 ms, and this runs for every batch (the
    engine's writer commits one every 0.2 s or 2,000 rows).
    """
    for chain, (seq, digest) in heads.items():
        (moved,) = tx.execute(
            "UPDATE audit_anchors SET head_seq = ?, head_hash = ? WHERE chain = ?",
            [seq, digest, chain],
        ).fetchall()[0]
        if not moved:
            tx.execute("INSERT INTO audit_anchors VALUES (?, ?, ?)", [chain, seq, digest])


def _anchor(cur: duckdb.DuckDBPyConnection, chain: str) -> str:
    """The prev_hash of a chain's first event: a run chain's `run.submitted` event."""
    if chain.startswith("run:"):
        # fetchall, not fetchone: an unfinished result would block the insert after it.
        rows = cur.execute(
            "SELECT hash FROM audit_events WHERE chain = ? AND kind = ? AND run_id = ? "
            "ORDER BY seq LIMIT 1",
            [CHANGES_CHAIN, RUN_SUBMITTED, chain.removeprefix("run:")],
        ).fetchall()
        if rows:
            return str(rows[0][0])
    return genesis_hash(chain)
