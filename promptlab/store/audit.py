"""Every SQL statement of the audit trail: appending chained events, reading, verifying.

The chaining itself (canonical JSON, hashes, what verification concludes) is pure and
lives in `promptlab.audit.chain`; see its docstring for how chains are anchored.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import duckdb

from promptlab.audit.chain import (
    CHANGES_CHAIN,
    RUN_ENDED,
    RUN_SUBMITTED,
    AuditDraft,
    AuditEvent,
    chain_drafts,
    check_checkpoints,
    genesis_hash,
    run_chain,
    verify_chain,
)
from promptlab.audit.checks import check_anchor, missing_chain
from promptlab.audit.redact import Redactor
from promptlab.audit.report import ChainStatus, RunRows, VerifyReport
from promptlab.records import VariantRecord
from promptlab.store.audit_rows import check_run_rows, stored_runs
from promptlab.store.connection import Store
from promptlab.store.runs import fetch_variants
from promptlab.store.sessions import row_with_history

_COLUMNS = 'chain, seq, event_id, trace_id, run_id, kind, actor, "at", payload, prev_hash, hash'
#: Rows `events` returns unless told otherwise.
DEFAULT_LIMIT = 1_000
#: Events per page read while verifying (a page is held in memory at once).
VERIFY_PAGE = 5_000


@dataclass(frozen=True)
class AuditFilter:
    """What the Audit page and `audit_events` filter on; None means any.

    `version_id` and `model` match result events (and change events naming them);
    `status` and `error_kind` match result and attempt events (an attempt's status is
    `ok` or `error`); `experiment` matches the runs made from it and its own events.
    """

    run_id: str | None = None
    experiment: str | None = None
    version_id: str | None = None
    model: str | None = None
    status: str | None = None
    error_kind: str | None = None
    kind: str | None = None
    trace_id: str | None = None
    chain: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int | None = DEFAULT_LIMIT


_ATTEMPT_COLUMNS = (
    "attempt, started_at, ended_at, outcome, error_kind, http_status, error_message, "
    "wait_ms, wait_reason, retry_after_s, latency_ms, reask"
)


@dataclass(frozen=True)
class ItemRecord:
    """An item's stored rows, for its trace (see `AuditLog.item_record`)."""

    result: dict[str, Any] | None
    attempts: tuple[dict[str, Any], ...]
    values: dict[str, Any] | None
    variant: VariantRecord | None


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
    # table's columns are in the stored order (_COLUMNS).
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


def _event(row: tuple[Any, ...]) -> AuditEvent:
    chain, seq, event_id, trace_id, run_id, kind, actor, at, payload, prev, digest = row
    return AuditEvent(
        chain, int(seq), event_id, trace_id, run_id, kind, actor, at,
        payload if isinstance(payload, str) else json.dumps(payload), prev, digest,
    )  # fmt: skip


class AuditLog:
    """Reads and writes of the audit trail outside the engine's batches."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- writing ---------------------------------------------------------------------

    def record_change(
        self,
        kind: str,
        actor: str,
        payload: Mapping[str, Any],
        *,
        run_id: str | None = None,
        at: datetime | None = None,
    ) -> None:
        """Append one change event (`promptlab.audit.chain` kinds, or another module's)."""
        draft = AuditDraft(
            chain=CHANGES_CHAIN,
            kind=kind,
            event_id=uuid.uuid4().hex,
            at=at or self.store.clock.now(),
            payload=dict(payload),
            actor=actor,
            run_id=run_id,
        )
        with self.store.transaction() as tx:
            append_events(tx, [draft], Redactor.from_environ())

    def record_run_end(self, run_id: str, actor: str, payload: Mapping[str, Any]) -> None:
        """A `run.ended` change event pinning the run chain's head (see promptlab.audit.chain)."""
        chain = run_chain(run_id)
        with self.store.transaction() as tx:
            (row,) = tx.execute(
                "SELECT max(seq), arg_max(hash, seq) FROM audit_events WHERE chain = ?", [chain]
            ).fetchall()
            seq, digest = (int(row[0]), str(row[1])) if row and row[0] is not None else (0, "")
            draft = AuditDraft(
                chain=CHANGES_CHAIN,
                kind=RUN_ENDED,
                event_id=uuid.uuid4().hex,
                at=self.store.clock.now(),
                payload={**payload, "chain": chain, "head_seq": seq, "head_hash": digest},
                actor=actor,
                run_id=run_id,
            )
            append_events(tx, [draft], Redactor.from_environ())

    # ---- reading ---------------------------------------------------------------------

    def events(self, where: AuditFilter) -> list[AuditEvent]:
        """Events matching every filter set, oldest first (by time, then chain order)."""
        clauses, params = _where(where)
        sql = f"SELECT {_COLUMNS} FROM audit_events"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += ' ORDER BY "at", chain, seq'
        if where.limit is not None:
            sql += f" LIMIT {int(where.limit)}"
        with self.store.read() as cur:
            return [_event(r) for r in cur.execute(sql, params).fetchall()]

    def iter_events(self, where: AuditFilter) -> Iterator[AuditEvent]:
        """Every event `where` selects (its limit aside) in chain order, a keyset page at
        a time: an export of millions of events holds one page in memory, not all."""
        clauses, params = _where(where)
        selected = " AND ".join(clauses) or "TRUE"
        after: list[Any] = []
        while True:
            sql = f"SELECT {_COLUMNS}, rowid FROM audit_events WHERE {selected}"
            if after:
                sql += " AND (chain > ? OR (chain = ? AND (seq > ? OR (seq = ? AND rowid > ?))))"
            sql += " ORDER BY chain, seq, rowid LIMIT ?"
            with self.store.read() as cur:
                rows = cur.execute(sql, [*params, *after, VERIFY_PAGE]).fetchall()
            for row in rows:
                yield _event(row[:-1])
            if len(rows) < VERIFY_PAGE:
                return
            chain, seq, rowid = str(rows[-1][0]), int(rows[-1][1]), int(rows[-1][-1])
            after = [chain, chain, seq, seq, rowid]

    def trace(self, trace_or_key: str) -> list[AuditEvent]:
        """One item's events (its trace id is its idempotency key), in chain order."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM audit_events WHERE trace_id = ? ORDER BY chain, seq",
                [trace_or_key],
            ).fetchall()
        return [_event(r) for r in rows]

    def trace_ids(self, prefix: str, limit: int = 3) -> list[str]:
        """Trace ids starting with `prefix` (at most `limit`)."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT DISTINCT trace_id FROM audit_events WHERE starts_with(trace_id, ?) "
                "ORDER BY 1 LIMIT ?",
                [prefix, limit],
            ).fetchall()
        return [str(r[0]) for r in rows]

    def item_record(self, key: str) -> ItemRecord:
        """What a trace view shows of an item besides its events: its results row, its
        `attempts` rows, its dataset row and its variant (each None or empty if absent)."""
        with self.store.read() as cur:
            found = cur.execute("SELECT * FROM results WHERE idempotency_key = ?", [key])
            names = [d[0] for d in found.description or ()]
            rows = found.fetchall()
            result = dict(zip(names, rows[0], strict=True)) if rows else None
            attempts = cur.execute(
                f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE idempotency_key = ? "
                "ORDER BY attempt",
                [key],
            ).fetchall()
            item = cur.execute(
                "SELECT run_id, row_index, variant_index FROM items WHERE idempotency_key = ?",
                [key],
            ).fetchall()
            values: dict[str, Any] | None = None
            variant: VariantRecord | None = None
            if item:
                run_id, row_index, variant_index = item[0]
                stored = cur.execute(
                    "SELECT row_values FROM run_rows WHERE run_id = ? AND row_index = ?",
                    [run_id, row_index],
                ).fetchall()
                values = json.loads(stored[0][0]) if stored else None
                if values is not None:  # a replayed turn with the history it was sent with
                    values = row_with_history(cur, run_id, row_index, values)
                variants = fetch_variants(cur, run_id, variant_index)
                variant = variants[0] if variants else None
        names = _ATTEMPT_COLUMNS.split(", ")
        return ItemRecord(
            result, tuple(dict(zip(names, a, strict=True)) for a in attempts), values, variant
        )

    def untraced_item(self, prefix: str) -> tuple[str, str, str] | None:
        """The one item (key, run id, status) whose key starts with `prefix`, when it
        has no trace: cancelled before it was sent, or not answered yet."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT idempotency_key, run_id, status FROM items "
                "WHERE starts_with(idempotency_key, ?) LIMIT 2",
                [prefix],
            ).fetchall()
        if len(rows) != 1:
            return None
        key, run_id, status = rows[0]
        return str(key), str(run_id), str(status)

    def bucket_of(self, run_id: str, trace_id: str) -> int | None:
        """A split item's assignment bucket (recorded with the plan, not in the trace)."""
        with self.store.read() as cur:
            row = cur.execute(
                "SELECT a.bucket FROM assignments a JOIN items i ON i.run_id = a.run_id "
                "AND i.row_index = a.row_index WHERE i.idempotency_key = ? AND a.run_id = ?",
                [trace_id, run_id],
            ).fetchone()
        return None if row is None else int(row[0])

    def iter_chain(self, chain: str) -> Iterator[AuditEvent]:
        """One chain's events in seq order (ties in stored order), a page at a time.

        Keyset pages rather than one ORDER BY: DuckDB materialises a query's whole
        result, which at ~100k events of prompts and outputs passed the store's memory
        limit. Each page also looks only at the next VERIFY_PAGE seqs: with the keyset
        alone, every page sorted the rest of the chain for its top rows (a million
        events took 30 s to read; now 8). Events are appended in seq order, so zone
        maps skip the row groups outside the window.
        """
        with self.store.read() as cur:
            (first,) = cur.execute(
                "SELECT min(seq) FROM audit_events WHERE chain = ?", [chain]
            ).fetchall()[0]
        seq, rowid = (None, -1) if first is None else (int(first), -1)
        while seq is not None:
            with self.store.read() as cur:
                rows = cur.execute(
                    f"SELECT {_COLUMNS}, rowid FROM audit_events WHERE chain = ? "
                    "AND seq BETWEEN ? AND ? AND (seq > ? OR (seq = ? AND rowid > ?)) "
                    "ORDER BY seq, rowid LIMIT ?",
                    [chain, seq, seq + VERIFY_PAGE, seq, seq, rowid, VERIFY_PAGE],
                ).fetchall()
                if len(rows) < VERIFY_PAGE:  # the window is read: on past a gap, if any
                    (after,) = cur.execute(
                        "SELECT min(seq) FROM audit_events WHERE chain = ? AND seq > ?",
                        [chain, seq + VERIFY_PAGE],
                    ).fetchall()[0]
            for row in rows:
                yield _event(row[:-1])
            if len(rows) == VERIFY_PAGE:
                seq, rowid = int(rows[-1][1]), int(rows[-1][-1])
            else:
                seq, rowid = (None if after is None else int(after)), -1

    # ---- verifying -------------------------------------------------------------------

    def verify(self, rows: bool = True) -> VerifyReport:
        """Walk every chain, one at a time and streamed (the changes chain first: it
        holds the run chains' anchors and checkpoints), check each against its anchor,
        then (`rows`) each audited run's stored rows against its events; see
        `promptlab.audit.chain.verify_chain` and promptlab/audit/checks.py for what is reported.
        """
        with self.store.read() as cur:
            # One statement: a chain started meanwhile is seen with its anchor or not at all.
            found = cur.execute(
                "SELECT coalesce(e.chain, a.chain), e.chain IS NOT NULL, a.head_seq, "
                "a.head_hash FROM (SELECT DISTINCT chain FROM audit_events) e "
                "FULL JOIN audit_anchors a ON a.chain = e.chain"
            ).fetchall()
        chains = {str(c) for c, present, _, _ in found if present}
        anchors = {str(c): (int(s), str(h)) for c, _, s, h in found if s is not None}
        changes = list(self.iter_chain(CHANGES_CHAIN)) if CHANGES_CHAIN in chains else []
        firsts = {e.run_id: e.hash for e in changes if e.kind == RUN_SUBMITTED and e.run_id}
        checkpoints: dict[str, list[tuple[int, str, str]]] = {}
        for e in changes:
            if e.kind == RUN_ENDED and isinstance(e.payload.get("chain"), str):
                checkpoints.setdefault(e.payload["chain"], []).append(
                    (int(e.payload.get("head_seq", 0)), str(e.payload.get("head_hash")), e.event_id)
                )
        statuses: list[ChainStatus] = []
        for chain in sorted(chains, key=lambda c: (c != CHANGES_CHAIN, c)):
            run_id = chain.removeprefix("run:") if chain.startswith("run:") else None
            first = firsts.get(run_id) if run_id else None
            points = checkpoints.get(chain, ())
            anchor = anchors.get(chain)
            watch = {seq for seq, _, _ in points} | ({anchor[0]} if anchor else set())
            events = changes if chain == CHANGES_CHAIN else self.iter_chain(chain)
            status, hashes = verify_chain(chain, events, first or genesis_hash(chain), watch)
            if run_id is not None and first is None:
                status = replace(status, anchored=False)
            status = check_checkpoints(status, hashes, points)
            statuses.append(check_anchor(status, hashes, anchor))
        # A chain whose every event was deleted leaves its anchor, and its checkpoints.
        for chain in sorted(set(anchors) - chains):
            detail = f"its anchor recorded {anchors[chain][0]} events, and none is stored"
            statuses.append(missing_chain(chain, detail))
        for chain, points in sorted(checkpoints.items()):
            if chain not in chains and chain not in anchors and any(s > 0 for s, _, _ in points):
                empty = ChainStatus(chain, 0, 0, genesis_hash(chain), False)
                statuses.append(check_checkpoints(empty, {}, points))
        return self._verify_runs(statuses, rows)

    def _verify_runs(self, statuses: list[ChainStatus], rows: bool) -> VerifyReport:
        """The report, with each run holding rows checked: a run audited from its
        submission needs its chain; an unbroken chain's rows are checked against it."""
        broken = {s.chain for s in statuses if not s.ok}
        runs: list[RunRows] = []
        unaudited: list[str] = []
        for run in stored_runs(self.store):
            chain = run_chain(run.run_id)
            if not run.has_chain and not run.has_anchor:
                if run.submitted and (run.results or run.attempts):
                    detail = (
                        f"{run.results} results rows and {run.attempts} attempts rows but no "
                        "event, while its run.submitted event says the audit was on"
                    )
                    statuses.append(missing_chain(chain, detail))
                elif not run.submitted:
                    unaudited.append(run.run_id)
            elif rows and run.has_chain and chain not in broken:
                runs.append(check_run_rows(self.store, run))
        return VerifyReport(tuple(statuses), tuple(runs), tuple(unaudited))


def _where(f: AuditFilter) -> tuple[list[str], list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []

    def add(sql: str, *values: Any) -> None:
        clauses.append(sql)
        params.extend(values)

    if f.run_id is not None:
        add("run_id = ?", f.run_id)
    if f.experiment is not None:
        # A run belongs to an experiment when its run.submitted event names it (every
        # run made from one, split or not); change events name it themselves.
        add(
            "(run_id IN (SELECT run_id FROM audit_events WHERE chain = 'changes' AND "
            "kind = 'run.submitted' AND json_extract_string(payload, '$.experiment') = ?) "
            "OR json_extract_string(payload, '$.experiment') = ?)",
            f.experiment,
            f.experiment,
        )
    if f.version_id is not None:
        add("json_extract_string(payload, '$.version_id') = ?", f.version_id)
    if f.model is not None:
        add("json_extract_string(payload, '$.model') = ?", f.model)
    if f.status is not None:
        add("json_extract_string(payload, '$.status') = ?", f.status)
    if f.error_kind is not None:
        add("json_extract_string(payload, '$.error_kind') = ?", f.error_kind)
    if f.kind is not None:
        add("kind = ?", f.kind)
    if f.trace_id is not None:
        add("trace_id = ?", f.trace_id)
    if f.chain is not None:
        add("chain = ?", f.chain)
    if f.since is not None:
        add('"at" >= ?', f.since)
    if f.until is not None:
        add('"at" <= ?', f.until)
    return clauses, params
