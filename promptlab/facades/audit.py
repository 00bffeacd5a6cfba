"""`wb.audit`: the audit trail's chains checked, its events read, traced and exported.

Chaining and verification: promptlab/audit/chain.py; SQL: promptlab/store/audit.py and,
for the Audit page's reads, promptlab/store/audit_page.py. Changes are recorded through
`Context.audit_change` by the facade that makes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from promptlab.atomicfile import check_target, write_chunks
from promptlab.audit.chain import AuditEvent, AuditTrace, event_record
from promptlab.audit.report import VerifyReport
from promptlab.engine.record.trace import is_lean, trace_details
from promptlab.errors import ExportError, NotFoundError
from promptlab.facades.context import Context
from promptlab.store.audit import AuditFilter
from promptlab.store.audit_page import AuditPageReads

__all__ = ["Audit", "AuditFilter", "MAX_DOWNLOAD_EVENTS"]

#: Audit events one app download may hold (~1.3 KB each, built in the server's memory).
MAX_DOWNLOAD_EVENTS = 100_000


class Audit:
    """Verify the chains; read, trace and export events."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._log = context.audit_log
        self._page = AuditPageReads(context.store)

    def verify(self) -> VerifyReport:
        """Check every chain of the audit trail; the report names the first bad event of each."""
        return self._log.verify()

    def events(self, where: AuditFilter | None = None) -> list[AuditEvent]:
        """Events matching every filter `where` sets, oldest first (at most its limit:
        1,000 unless it says otherwise)."""
        return self._log.events(where or AuditFilter())

    def trace(self, trace_or_key: str) -> AuditTrace:
        """One item's trace by its trace id (its idempotency key) or a prefix of at least
        8 hex digits of it: every event in order, with its assignment bucket if split."""
        wanted = trace_or_key.strip().lower()
        if len(wanted) < 8:
            raise NotFoundError(f"trace {trace_or_key!r}: give at least 8 hex digits of it")
        ids = self._log.trace_ids(wanted, limit=3)
        if not ids:
            untraced = self._log.untraced_item(wanted)
            if untraced is not None:
                key, run, status = untraced
                why = f"it is {status} and has not been answered yet"
                if status == "cancelled":
                    why = "it was cancelled before it was sent (see its run's run.cancelled event)"
                elif status not in ("pending", "in_flight"):
                    why = f"it is {status}, from a run made with the audit off"
                raise NotFoundError(f"item {key} of run {run} has no trace events: {why}")
            raise NotFoundError(f"no audit trace whose id starts with {trace_or_key!r}")
        if len(ids) > 1:
            raise NotFoundError(
                f"trace {trace_or_key!r} is ambiguous: {', '.join(ids)}; give more digits"
            )
        events = tuple(self._log.trace(ids[0]))
        run_id = events[0].run_id if events else None
        bucket = self._log.bucket_of(run_id, ids[0]) if run_id else None
        result = next((e for e in reversed(events) if e.kind == "result"), None)
        if result is None or not is_lean(result.payload):
            return AuditTrace(ids[0], run_id, events, bucket)
        # A lean result event: its stages are read back from the rows it describes.
        record = self._log.item_record(ids[0])
        details, attempts, verified = trace_details(
            result.payload,
            result.at,
            record,
            self._context.settings.mask,
            self._context.redactor(),
        )
        return AuditTrace(ids[0], run_id, events, bucket, details, attempts, verified)

    def export(
        self,
        path: str | Path,
        *,
        run_id: str | None = None,
        where: AuditFilter | None = None,
        force: bool = False,
    ) -> int:
        """Write the events of a run (or those `where` selects, its limit aside) as JSON
        Lines in chain order, each with its seq and hashes so it can be checked again;
        return how many. Streamed a page at a time. The file appears whole or not at all
        (as `Exports.write_table`'s), an existing regular file is replaced only with
        `force`, and secret values are masked as in every export. Recorded as a
        ``table.exported`` event."""
        where = where or AuditFilter(run_id=run_id, limit=None)
        lines = self.export_lines(where)
        target = check_target(path, force=force)
        rows = write_chunks(target, lines, force=force)
        self.record_export(where, target.name, rows)
        return rows

    def export_lines(self, where: AuditFilter) -> Iterator[bytes]:
        """The lines `export` writes, streamed a page at a time (a server streams them to
        a client that writes its own file). An unknown run is an error now, not an empty
        file."""
        if where.run_id is not None:
            self._context.reads.run(where.run_id)
        return self._lines(self._log.iter_events(where))

    def record_export(self, where: AuditFilter, file_name: str, rows: int) -> None:
        """The ``table.exported`` event of an export of `rows` events to `file_name`."""
        self._context.audit_change(
            "table.exported",
            self._context.author(),
            {"table": "audit_events", "run_id": where.run_id, "path": file_name, "rows": rows},
            run_id=where.run_id,
        )

    def _lines(self, events: Iterable[AuditEvent]) -> Iterator[bytes]:
        """Events as JSON Lines with every secret value masked (the stored payloads are
        redacted already; this is the second guard every export has). A line holds no
        newline (JSON escapes them), so masking line by line misses nothing."""
        secrets = self._context.secrets()
        for event in events:
            line = json.dumps(event_record(event), ensure_ascii=False) + "\n"
            for secret in secrets:
                line = line.replace(secret, "[redacted]")
            yield line.encode()

    # ---- the Audit page's reads ----------------------------------------------------

    def page_events(self, where: AuditFilter, newest_first: bool = False) -> list[AuditEvent]:
        """Events `where` selects (at most its limit), oldest or newest first."""
        return self._page.events(where, newest_first)

    def count(self, where: AuditFilter | None = None) -> int:
        """How many events `where` selects (every event without it), its limit aside."""
        return self._page.count(where or AuditFilter(limit=None))

    def facets(self) -> dict[str, list[str]]:
        """The values item events hold in version_id, model, status and error_kind."""
        return self._page.facets()

    def export_bytes(self, where: AuditFilter) -> bytes:
        """Every event `where` selects (its limit aside) as the JSON Lines `export` writes,
        for the app's download; recorded as a ``table.exported`` change event.

        A download is held in memory whole (in the app's server), so more than
        MAX_DOWNLOAD_EVENTS events is refused: `promptlab audit export` streams any number.
        """
        count = self.count(where)
        if count > MAX_DOWNLOAD_EVENTS:
            raise ExportError(
                f"{count:,} audit events are more than a download holds "
                f"({MAX_DOWNLOAD_EVENTS:,}): narrow the filters, or write them with "
                "`promptlab audit export --run RUN_ID -o FILE`"
            )
        lines = list(self._lines(self._log.iter_events(where)))
        self._context.audit_change(
            "table.exported",
            self._context.author(),
            {
                "table": "audit_events",
                "run_id": where.run_id,
                "path": "download",
                "rows": len(lines),
            },
            run_id=where.run_id,
        )
        return b"".join(lines)
