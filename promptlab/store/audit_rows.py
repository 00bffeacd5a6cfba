"""The SQL of verify's row checks: each run's `results` and `attempts` rows joined to the
events that recorded them, streamed a page at a time (what the checks conclude is in
promptlab/audit/checks.py).

DuckDB joins; Python hashes. The row digests are orjson text hashed with sha256
(promptlab.audit.chain.row_digest), which SQL cannot reproduce byte for byte, so each row's
digested values are selected in the form `stored_values` gives them (times as epoch
microseconds, `reask` as a boolean) and hashed here, one page of rows in memory at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from promptlab.audit.chain import (
    ATTEMPT_DIGEST_COLUMNS,
    CHANGES_CHAIN,
    RESULT_DIGEST_COLUMNS,
    RUN_SUBMITTED,
    row_digest,
    run_chain,
)
from promptlab.audit.checks import (
    ANSWER_COLUMNS,
    attempt_modified,
    holds_answer,
    payload_of,
    result_event_orphaned,
    result_modified,
)
from promptlab.audit.report import RunRows
from promptlab.store.connection import Store

#: Rows fetched into Python at once while hashing: a page of results holds their
#: outputs, whose size nothing caps (5,000 rows hashed no faster on a million results).
ROW_PAGE = 1_000


def _digested(alias: str, columns: tuple[str, ...]) -> str:
    """The digested columns as `stored_values` gives them, selected from `alias`."""
    out = []
    for column in columns:
        if column in ("finished_at", "started_at", "ended_at"):
            out.append(f"epoch_us({alias}.{column})")
        elif column == "reask":
            out.append(f"coalesce({alias}.reask, false)")
        else:
            out.append(f"{alias}.{column}")
    return ", ".join(out)


# The run's result events (with the hashes they recorded, and the answered attempt
# they name: a result event's id is `<key>/final/<attempt>`, and the engine ends an
# answered item on the attempt that answered) and attempt events (with the attempt
# number they copy), each a subquery over one chain (its `?` the chain).
_RESULT_EVENTS = (
    "SELECT trace_id, seq, event_id, \"at\", json_extract_string(payload, '$.status') AS "
    "status, json_extract_string(payload, '$.result_sha256') AS sha, "
    "json_extract_string(payload, '$.attempt_sha256') AS attempt_sha, "
    "TRY_CAST(split_part(event_id, '/final/', 2) AS BIGINT) AS answered, "
    "json_exists(payload, '$.routing') AS legacy "
    "FROM audit_events WHERE chain = ? AND kind = 'result'"
)
_ATTEMPT_EVENTS = (
    "SELECT trace_id, seq, event_id, payload::VARCHAR AS payload, "
    "TRY_CAST(json_extract(payload, '$.attempt') AS BIGINT) AS attempt "
    "FROM audit_events WHERE chain = ? AND kind = 'attempt'"
)
# Result events whose answered attempt was hashed (its `attempt_sha256`).
_ANSWERS = f"SELECT * FROM ({_RESULT_EVENTS}) WHERE attempt_sha IS NOT NULL"

_RESULTS_JOINED = (
    f"SELECT {_digested('r', RESULT_DIGEST_COLUMNS)}, e.seq, e.event_id, e.sha "
    f"FROM results r LEFT JOIN ({_RESULT_EVENTS}) e "
    'ON e.trace_id = r.idempotency_key AND e."at" = r.finished_at WHERE r.run_id = ?'
)
# Result events whose row is gone (no results row of their item at their time), with
# what the item holds now.
_RESULT_EVENTS_ORPHANED = (
    f"WITH e AS ({_RESULT_EVENTS}), orphaned AS (SELECT * FROM e ANTI JOIN results x "
    'ON x.idempotency_key = e.trace_id AND x.finished_at = e."at" WHERE e.sha IS NOT NULL) '
    'SELECT o.seq, o.event_id, o.trace_id, o.status, o."at", r.status, r.finished_at, '
    "i.status FROM orphaned o LEFT JOIN results r ON r.idempotency_key = o.trace_id "
    "LEFT JOIN items i ON i.idempotency_key = o.trace_id ORDER BY o.seq"
)
# Each attempts row with its own event (a failed or re-asked attempt) or the result
# event that hashed it (the answered one), and whether its item has a result event
# older than attempt hashes (a copy of every stage, or an answer with no hash).
_ATTEMPTS_JOINED = (
    f"WITH re AS ({_RESULT_EVENTS}) "
    f"SELECT {_digested('a', ATTEMPT_DIGEST_COLUMNS)}, ae.seq, ae.event_id, ae.payload, "
    "h.seq, h.event_id, h.attempt_sha, a.idempotency_key IN (SELECT trace_id FROM re WHERE "
    "legacy OR (status = 'succeeded' AND attempt_sha IS NULL)) AS unhashed "
    f"FROM attempts a LEFT JOIN ({_ATTEMPT_EVENTS}) ae "
    "ON ae.trace_id = a.idempotency_key AND ae.attempt = a.attempt "
    "LEFT JOIN (SELECT * FROM re WHERE attempt_sha IS NOT NULL) h "
    "ON h.trace_id = a.idempotency_key AND h.answered = a.attempt WHERE a.run_id = ?"
)
# Attempt events, then hashed answered attempts, whose attempts row is gone.
_ATTEMPT_EVENTS_ORPHANED = (
    f"SELECT ae.seq, ae.event_id, ae.trace_id, ae.attempt FROM ({_ATTEMPT_EVENTS}) ae "
    "ANTI JOIN attempts a ON a.idempotency_key = ae.trace_id AND a.attempt = ae.attempt "
    "ORDER BY ae.seq"
)
_ANSWERS_ORPHANED = (
    f"SELECT h.seq, h.event_id, h.trace_id, h.answered FROM ({_ANSWERS}) h "
    "ANTI JOIN attempts a ON a.idempotency_key = h.trace_id AND a.attempt = h.answered "
    "ORDER BY h.seq"
)
#: Each query above, with the event it finds and what that event recorded of the row.
_ATTEMPT_ORPHANS = (
    (_ATTEMPT_EVENTS_ORPHANED, "attempt event", "it"),
    (_ANSWERS_ORPHANED, "result event", "its hash"),
)
# A results row a cancel wrote in bulk, without an event (see `holds_answer`).
_CLOSED = " AND ".join(["status = 'cancelled'", *(f"{c} IS NULL" for c in ANSWER_COLUMNS)])
# Every run holding rows: how many the audit should have recorded (results rows but
# those a cancel closed in bulk, and attempts rows), whether its chain or its anchor
# exists, and whether a run.submitted event says it was audited from the start. One
# statement: a run starting meanwhile is seen whole or not at all.
_RUNS = (
    f"WITH stored AS (SELECT run_id, count(*) FILTER (WHERE NOT ({_CLOSED})) AS results, "
    "0 AS attempts FROM results GROUP BY run_id "
    "UNION ALL SELECT run_id, 0, count(*) FROM attempts GROUP BY run_id) "
    "SELECT s.run_id, sum(s.results), sum(s.attempts), "
    "EXISTS (SELECT 1 FROM audit_events e WHERE e.chain = 'run:' || s.run_id), "
    "EXISTS (SELECT 1 FROM audit_anchors a WHERE a.chain = 'run:' || s.run_id), "
    f"EXISTS (SELECT 1 FROM audit_events e WHERE e.chain = '{CHANGES_CHAIN}' "
    f"AND e.kind = '{RUN_SUBMITTED}' AND e.run_id = s.run_id) "
    "FROM stored s GROUP BY s.run_id ORDER BY s.run_id"
)


@dataclass(frozen=True)
class StoredRun:
    """A run holding results or attempts rows, and what the audit holds of it."""

    run_id: str
    #: Rows the audit should have recorded: results rows (but those a cancel closed in
    #: bulk, which have no event) and attempts rows.
    results: int
    attempts: int
    has_chain: bool
    has_anchor: bool
    #: A `run.submitted` event names it: the audit was on from its submission.
    submitted: bool


def stored_runs(store: Store) -> list[StoredRun]:
    with store.read() as cur:
        rows = cur.execute(_RUNS).fetchall()
    return [StoredRun(str(r[0]), int(r[1]), int(r[2]), *map(bool, r[3:])) for r in rows]


def check_run_rows(store: Store, run: StoredRun) -> RunRows:
    """Every results and attempts row of `run` against its events, streamed."""
    tally = RunRows(run.run_id)
    chain = run_chain(run.run_id)
    _check_results(store, chain, run, tally)
    _check_result_events(store, chain, tally)
    _check_attempts(store, chain, run, tally)
    _check_attempt_events(store, chain, tally)
    return tally


def _pages(store: Store, sql: str, params: list[Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of one query, fetched ROW_PAGE at a time from DuckDB's streamed result."""
    with store.read() as cur:
        found = cur.execute(sql, params)
        while page := found.fetchmany(ROW_PAGE):
            yield from page


def _event_payload(store: Store, chain: str, seq: int) -> dict[str, Any]:
    """One event's payload: for the detail of a mismatch (a few per run at most)."""
    with store.read() as cur:
        rows = cur.execute(
            "SELECT payload FROM audit_events WHERE chain = ? AND seq = ? LIMIT 1", [chain, seq]
        ).fetchall()
    return payload_of(rows[0][0]) if rows else {}


def _check_results(store: Store, chain: str, run: StoredRun, tally: RunRows) -> None:
    width = len(RESULT_DIGEST_COLUMNS)
    for row in _pages(store, _RESULTS_JOINED, [chain, run.run_id]):
        values, (seq, event_id, sha) = row[:width], row[width:]
        key = str(values[0])
        if seq is None:
            _uncovered_result(dict(zip(RESULT_DIGEST_COLUMNS, values, strict=True)), run, tally)
        elif sha is None:
            tally.unhashed += 1
        elif row_digest(values) == sha:
            tally.results += 1
        else:
            detail = ""
            if tally.wants_detail():
                stored = dict(zip(RESULT_DIGEST_COLUMNS, values, strict=True))
                detail = result_modified(seq, event_id, _event_payload(store, chain, seq), stored)
            tally.add("results", key, None, "modified", detail)


def _uncovered_result(row: dict[str, Any], run: StoredRun, tally: RunRows) -> None:
    """A results row no result event recorded (none at its `finished_at`)."""
    key = str(row["idempotency_key"])
    if row["status"] == "cancelled":
        if holds_answer(row):
            tally.add(
                "results",
                key,
                None,
                "inserted",
                "a cancelled row without an event (as a cancel writes them) holds an answer",
            )
        else:
            tally.closed += 1
    elif run.submitted:
        tally.add(
            "results",
            key,
            None,
            "inserted",
            f"no result event records it ({row['status']}; its finished_at or the event "
            "may have changed, or it was written with the audit off)",
        )
    else:
        tally.unaudited += 1


def _check_result_events(store: Store, chain: str, tally: RunRows) -> None:
    last = None
    for seq, event_id, key, status, at, now_status, now_at, item in _pages(
        store, _RESULT_EVENTS_ORPHANED, [chain]
    ):
        if seq == last:  # an item holding two rows: judged on its first
            continue
        last = seq
        why = result_event_orphaned(status, at, now_status, now_at, item)
        if why is not None:
            detail = f"result event seq {seq} ({event_id}) recorded a {status} row: {why}"
            tally.add("results", str(key), None, "deleted", detail)


def _check_attempts(store: Store, chain: str, run: StoredRun, tally: RunRows) -> None:
    width = len(ATTEMPT_DIGEST_COLUMNS)
    for row in _pages(store, _ATTEMPTS_JOINED, [chain, chain, run.run_id]):
        values, (seq, event_id, payload, hashed_by, answer_id, sha, unhashed) = (
            row[:width],
            row[width:],
        )
        key, attempt = str(values[0]), int(values[2])
        if seq is not None:
            stored = dict(zip(ATTEMPT_DIGEST_COLUMNS, values, strict=True))
            why = attempt_modified(seq, event_id, payload_of(payload), stored)
            if why is None:
                tally.attempts += 1
            else:
                tally.add("attempts", key, attempt, "modified", why)
        elif hashed_by is not None:
            if row_digest(values) == sha:
                tally.attempts += 1
            else:
                detail = (
                    f"it no longer matches the attempt_sha256 of result event seq {hashed_by} "
                    f"({answer_id})"
                )
                tally.add("attempts", key, attempt, "modified", detail)
        elif unhashed:
            tally.unhashed += 1
        elif run.submitted:
            tally.add("attempts", key, attempt, "inserted", "no event records it")
        else:
            tally.unaudited += 1


def _check_attempt_events(store: Store, chain: str, tally: RunRows) -> None:
    for sql, event, recorded in _ATTEMPT_ORPHANS:
        for seq, event_id, key, attempt in _pages(store, sql, [chain]):
            detail = f"{event} seq {seq} ({event_id}) recorded {recorded}"
            tally.add("attempts", str(key), attempt, "deleted", detail)
