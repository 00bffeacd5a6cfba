"""The audit trail's SQL: change events recorded, events and traces read, chains verified.

Events are chained and inserted by audit_append.py (the engine's writer calls it for
each batch); the filters reads take are in audit_filter.py.

The chaining itself (canonical JSON, hashes, what verification concludes) is pure and
lives in `promptlab.audit.chain`; see its docstring for how chains are anchored.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from promptlab.audit.chain import (
    CHANGES_CHAIN,
    RUN_ENDED,
    RUN_SUBMITTED,
    AuditDraft,
    AuditEvent,
    genesis_hash,
    run_chain,
)
from promptlab.audit.checks import check_anchor, check_run_ends, missing_chain
from promptlab.audit.redact import Redactor
from promptlab.audit.report import ChainStatus, RunRows, VerifyReport
from promptlab.audit.walk import check_checkpoints, verify_chain
from promptlab.records import VariantRecord
from promptlab.store.audit_append import append_events
from promptlab.store.audit_filter import DEFAULT_LIMIT, AuditFilter
from promptlab.store.audit_filter import EVENT_COLUMNS as _COLUMNS
from promptlab.store.audit_filter import event_from_row as _event
from promptlab.store.audit_filter import filter_clauses as _where
from promptlab.store.audit_rows import check_run_rows, stored_runs
from promptlab.store.connection import Store
from promptlab.store.runs import fetch_variants
from promptlab.store.sessions import row_with_history

# The append (audit_append.py) and the filters (audit_filter.py) live beside this
# module; their names stay importable from here, the private ones for audit_page.py.
__all__ = [
    "DEFAULT_LIMIT",
    "VERIFY_PAGE",
    "AuditFilter",
    "AuditLog",
    "ItemRecord",
    "append_events",
]

#: Events per page read while verifying (a page is held in memory at once).
VERIFY_PAGE = 5_000

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
        `promptlab.audit.walk.verify_chain` and promptlab/audit/checks.py for what is reported.
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
            if chain == CHANGES_CHAIN:
                status = check_run_ends(status, changes)
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
