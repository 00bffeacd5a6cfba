"""`wb.review`: the review queue, where a person settles what the models could not.

Rows come in from cross-checks (a decision of `review`, promptlab/evaluation/crossruns.py),
from results that failed their checks, from anomaly alerts, or by hand; one item per
run row. A reviewer sees the row, every variant's (every model's) answer with its
scores, and the cross-check's figures, then accepts the proposed answer, corrects it,
or rejects the row. Each decision is an audit change event with its actor; accepted
and corrected answers export as a dataset of expected answers for the next evaluation.
Two reviewers never overwrite each other: a decision names the item's version its
decider saw, and is refused (StaleChangeError) when the item has changed since or is
already settled; a settled item changes only after `reopen`, itself audited.
"""

from __future__ import annotations

import builtins  # `list` below names a method: annotations say builtins.list
import csv
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from promptlab.atomicfile import check_target, staged_file
from promptlab.data.export import csv_cell
from promptlab.errors import ReviewError, StaleChangeError, moment
from promptlab.facades.context import Context
from promptlab.records.review import (
    CrosscheckSummary,
    ReviewDetail,
    ReviewItem,
    ReviewSource,
    ReviewStatus,
)
from promptlab.store.crosscheck import CrosscheckStore
from promptlab.store.review import NewItem, ReviewStore
from promptlab.store.runs import RunStore

__all__ = ["EXPORT_FORMATS", "MAX_ADDED", "MAX_ANSWER_CHARS", "Review"]

#: Most rows one call sends to review: a queue is for a person, not for a whole run.
MAX_ADDED = 1_000
#: Longest answer or note a reviewer may type.
MAX_ANSWER_CHARS = 10_000
EXPORT_FORMATS = (".jsonl", ".csv")


class Review:
    """Send rows to review, see them, decide them, export what was settled."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._store = ReviewStore(context.store)

    # ---- reading ---------------------------------------------------------------------

    def list(
        self, status: str | None = "open", run_id: str | None = None, limit: int = 200
    ) -> builtins.list[ReviewItem]:
        """Items oldest first; `status=None` for every status."""
        if status is not None and status not in set(ReviewStatus):
            raise ReviewError(f"review: status is one of {', '.join(ReviewStatus)}, got {status!r}")
        return [self._masked(i) for i in self._store.items(status, run_id, limit)]

    def counts(self, run_id: str | None = None) -> dict[str, int]:
        """Items per status (of one run's rows, given `run_id`)."""
        return self._store.counts(run_id)

    def show(self, item_id: int) -> ReviewDetail:
        """The item, its dataset row, each variant's answer with its scores, and the
        cross-check decision, masked as everything shown is."""
        item = self._item(item_id)
        redactor = self._context.redactor()
        answers = tuple(
            replace(a, output=redactor.optional(a.output), error=redactor.optional(a.error))
            for a in self._store.answers(item.run_id, item.row_index)
        )
        row = self._store.row_values(item.run_id, item.row_index) or {}
        decision = CrosscheckStore(self._context.store).decision(item.run_id, item.row_index)
        return ReviewDetail(item, redactor.value(row), answers, decision)

    def crosscheck(self, run_id: str) -> CrosscheckSummary | None:
        """A cross-checked run's model weights and decision counts (None: not one)."""
        return CrosscheckStore(self._context.store).summary(run_id)

    # ---- sending rows to review ----------------------------------------------------------

    def add(
        self, run_id: str, rows: Sequence[int], reason: str = "sent by hand"
    ) -> builtins.list[int]:
        """Send rows of a run to review by hand, each named by its `row_index` (from 0;
        a person's row N, as the pages number rows, is row_index N-1); the ids of the
        items opened (a row already in the queue keeps its item)."""
        RunStore(self._context.store).get_run(run_id)  # a clear error for an unknown run
        if len(rows) > MAX_ADDED:
            raise ReviewError(
                f"review add: at most {MAX_ADDED:,} rows at a time, got {len(rows):,}"
            )
        reason = _bounded(reason, "reason") or "sent by hand"
        items: builtins.list[NewItem] = []
        for row in rows:
            answers = self._store.answers(run_id, row)
            if not answers:
                raise ReviewError(
                    f"review add: run {run_id} has no results for row {row + 1} (row_index {row})"
                )
            proposed = answers[0].output if len(answers) == 1 else None
            items.append((run_id, row, None, str(ReviewSource.HAND), reason, proposed))
        return self._open(items, run_id)

    def add_failed_checks(self, run_id: str) -> builtins.list[int]:
        """Send every result of the run that failed its checks (schema, rules)."""
        RunStore(self._context.store).get_run(run_id)
        items = [
            (run_id, row, key, str(ReviewSource.CHECK), "failed its checks", output)
            for row, key, output in self._store.failed_checks(run_id, MAX_ADDED)
        ]
        return self._open(items, run_id)

    def add_alerted(self, run_id: str) -> builtins.list[int]:
        """Send the results an anomaly alert of the run was about (those inside its span
        that did not complete)."""
        RunStore(self._context.store).get_run(run_id)
        items = [
            (run_id, row, key, str(ReviewSource.ANOMALY), alert[:500], output)
            for row, key, output, alert in self._store.alerted(run_id, MAX_ADDED)
        ]
        return self._open(items, run_id)

    def _open(self, items: Sequence[NewItem], run_id: str) -> builtins.list[int]:
        author = self._context.author()
        ids = self._store.add(items, author, self._context.store.clock.now())
        if ids:
            sources = sorted({i[3] for i in items})
            self._context.audit_change(
                "review.added",
                author,
                {"items": ids[:100], "count": len(ids), "source": sources},
                run_id=run_id,
            )
        return ids

    # ---- deciding --------------------------------------------------------------------
    # Each decision names the item's version its decider saw (`version`; None: the item
    # as it is now). One on an item changed since, or already settled, is refused with a
    # StaleChangeError naming who changed it and when: two reviewers never overwrite each
    # other, and changing a settled item takes an explicit, audited `reopen`.

    def accept(
        self, item_id: int, note: str | None = None, *, version: int | None = None
    ) -> ReviewItem:
        """Settle on the proposed answer."""
        item = self._item(item_id)
        if item.proposed is None:
            raise ReviewError(
                f"review {item_id}: no answer was proposed; correct it with the right one"
            )
        return self._decide(item, version, ReviewStatus.ACCEPTED, item.proposed, note)

    def correct(
        self, item_id: int, answer: str, note: str | None = None, *, version: int | None = None
    ) -> ReviewItem:
        """Settle on `answer` instead of the proposed one."""
        settled = _bounded(answer, "answer")
        if not settled:
            raise ReviewError(f"review {item_id}: the corrected answer is empty")
        return self._decide(self._item(item_id), version, ReviewStatus.CORRECTED, settled, note)

    def reject(
        self, item_id: int, note: str | None = None, *, version: int | None = None
    ) -> ReviewItem:
        """Keep the row out of the expected answers (no answer is right, or it is noise)."""
        return self._decide(self._item(item_id), version, ReviewStatus.REJECTED, None, note)

    def reopen(
        self, item_id: int, note: str | None = None, *, version: int | None = None
    ) -> ReviewItem:
        """Open a settled item again so it can be decided anew; its decision is cleared
        from the item and kept in the audit trail with the reopen."""
        item = self._item(item_id)
        seen = item.version if version is None else version
        if item.status == ReviewStatus.OPEN and item.version == seen:
            raise ReviewError(f"review {item_id}: the item is open; there is nothing to reopen")
        author, note = self._context.author(), _bounded(note, "note")
        if item.version != seen or not self._store.reopen(
            item.id, seen, author, self._context.store.clock.now()
        ):
            raise _stale(self._item(item_id), seen, deciding=False)
        decided_at = item.decided_at.isoformat() if item.decided_at else None
        payload = {
            "item": item.id,
            "row": item.row_index,
            "version": seen + 1,
            "was": item.status,
            "answer": item.answer,
            "decided_by": item.decided_by,
            "decided_at": decided_at,
            "note": note,
        }
        self._context.audit_change("review.reopened", author, payload, run_id=item.run_id)
        return self._item(item.id)

    def _decide(
        self,
        item: ReviewItem,
        version: int | None,
        status: ReviewStatus,
        answer: str | None,
        note: str | None,
    ) -> ReviewItem:
        seen = item.version if version is None else version
        author, note = self._context.author(), _bounded(note, "note")
        if item.status != ReviewStatus.OPEN or item.version != seen:
            raise _stale(item, seen, deciding=True)
        if not self._store.decide(
            item.id, seen, str(status), answer, note, author, self._context.store.clock.now()
        ):
            raise _stale(self._item(item.id), seen, deciding=True)  # settled in between
        payload = {
            "item": item.id,
            "row": item.row_index,
            "version": seen + 1,
            "was": item.status,
            "proposed": item.proposed,
            "answer": answer,
            "note": note,
        }
        self._context.audit_change(f"review.{status}", author, payload, run_id=item.run_id)
        return self._item(item.id)

    # ---- export ------------------------------------------------------------------------

    def export(
        self,
        path: str | Path,
        *,
        run_id: str | None = None,
        column: str = "expected",
        force: bool = False,
        raw: bool = False,
        recorded_as: str | None = None,
    ) -> int:
        """Write accepted and corrected answers as a dataset: each row as it was, with
        the settled answer in `column` (JSON Lines, or CSV by the file's suffix); the
        rows written. Masked like every export; in CSV, text a spreadsheet would run as
        a formula gets a leading `'` (promptlab/data/export.py) unless `raw`.
        `recorded_as`: the file the audit trail names (a client's, for a server's copy)."""
        target = check_target(path, force=force)
        self.check_export_name(target)
        redactor = self._context.redactor()
        rows: builtins.list[dict[str, Any]] = []
        for batch in self._store.decided(run_id):
            rows.extend(redactor.value({**row, column: answer}) for row, answer in batch)
        with staged_file(target, force=force) as staged:
            _write(staged, rows, csv_file=target.suffix.lower() == ".csv", raw=raw)
        payload = {"file": recorded_as or str(target), "rows": len(rows)}
        self._context.audit_change(
            "review.exported", self._context.author(), payload, run_id=run_id
        )
        return len(rows)

    def check_export_name(self, path: str | Path) -> None:
        """Refused unless `path` names a .jsonl or .csv file (the format `export` writes)."""
        if Path(path).suffix.lower() not in EXPORT_FORMATS:
            raise ReviewError(f"review export {path}: expected a .jsonl or .csv file")

    # ---- helpers -----------------------------------------------------------------------

    def _item(self, item_id: int) -> ReviewItem:
        item = self._store.get(item_id)
        if item is None:
            raise ReviewError(f"review: no item {item_id} (see promptlab review list)")
        return item

    def _masked(self, item: ReviewItem) -> ReviewItem:
        redactor = self._context.redactor()
        return replace(item, proposed=redactor.optional(item.proposed))


def _stale(item: ReviewItem, seen: int, *, deciding: bool) -> StaleChangeError:
    """The refusal of a change to `item` made on version `seen`: who changed it last, when."""
    where = f"review {item.id} (row {item.row_index + 1} of run {item.run_id})"
    by = item.changed_by or item.decided_by or "someone"
    at = item.changed_at or item.decided_at
    since = f" after you saw version {seen}" if seen != item.version else ""
    if item.status == ReviewStatus.OPEN:
        what = f"was reopened by {by} at {moment(at)}{since}; look at it again"
    else:
        then = "reopen it first" if deciding else "look at it again"
        what = f"was settled `{item.status}` by {by} at {moment(at)}{since}; {then}"
    what += f" (version {item.version} now)"
    return StaleChangeError(f"{where} {what}", changed_by=by, changed_at=at)


def _bounded(text: str | None, what: str) -> str | None:
    if text is None:
        return None
    if len(text) > MAX_ANSWER_CHARS:
        raise ReviewError(f"review: the {what} is over {MAX_ANSWER_CHARS:,} characters")
    return text.strip()


def _write(path: Path, rows: Sequence[dict[str, Any]], *, csv_file: bool, raw: bool) -> None:
    with path.open("w", encoding="utf-8", newline="") as out:
        if not csv_file:
            out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
            return
        columns = list(dict.fromkeys(k for row in rows for k in row))
        # The header too: its names are the dataset's columns, anyone's text.
        cell = (lambda value: value) if raw else csv_cell
        writer = csv.writer(out)
        writer.writerow([cell(c) for c in columns])
        writer.writerows([cell(row.get(c, "")) for c in columns] for row in rows)
