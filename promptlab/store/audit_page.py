"""The Audit page's reads beside `store.audit`: a filtered page of events either way
round, how many match, and the values a filter can take."""

from __future__ import annotations

from promptlab.audit.chain import AuditEvent
from promptlab.store.audit import _COLUMNS, AuditFilter, _event, _where
from promptlab.store.connection import Store

#: Payload fields the Audit page offers as filter choices (result and attempt events).
FACETS = ("version_id", "model", "status", "error_kind")
#: At most this many choices per facet.
FACET_LIMIT = 200


class AuditPageReads:
    def __init__(self, store: Store) -> None:
        self.store = store

    def events(self, where: AuditFilter, newest_first: bool = False) -> list[AuditEvent]:
        """Events matching `where` (at most `where.limit`), oldest or newest first."""
        clauses, params = _where(where)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {_COLUMNS} FROM audit_events"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += f' ORDER BY "at" {order}, chain {order}, seq {order}'
        if where.limit is not None:
            sql += f" LIMIT {int(where.limit)}"
        with self.store.read() as cur:
            return [_event(r) for r in cur.execute(sql, params).fetchall()]

    def count(self, where: AuditFilter) -> int:
        """How many events match `where` (its limit aside)."""
        clauses, params = _where(where)
        sql = "SELECT count(*) FROM audit_events"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        with self.store.read() as cur:
            row = cur.execute(sql, params).fetchone()
        return int(row[0]) if row else 0

    def facets(self) -> dict[str, list[str]]:
        """The distinct values of each of FACETS over item events, sorted (one scan)."""
        paths = [f"$.{name}" for name in FACETS]
        lists = ", ".join(f"list(DISTINCT f[{i + 1}])" for i in range(len(FACETS)))
        with self.store.read() as cur:
            row = cur.execute(
                f"SELECT {lists} FROM (SELECT json_extract_string(payload, ?) AS f "
                "FROM audit_events WHERE trace_id IS NOT NULL)",
                [paths],
            ).fetchone()
        values = row if row is not None else [None] * len(FACETS)
        return {
            name: sorted(str(v) for v in (found or []) if v is not None)[:FACET_LIMIT]
            for name, found in zip(FACETS, values, strict=True)
        }
