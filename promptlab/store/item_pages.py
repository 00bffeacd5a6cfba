"""One run's items as the items list and the item view read them: a filtered page in
plan order, and one item with its row, variant, final row and attempts."""

from __future__ import annotations

import json
from typing import Any

import duckdb

from promptlab.errors import NotFoundError, PromptlabError
from promptlab.records import AttemptRow, FinalRow, ItemDetail, ItemPage, ItemRow, ItemStatus
from promptlab.store.runs import fetch_run, fetch_variants
from promptlab.store.sessions import row_with_history

#: Characters of an item's output the items list shows.
OUTPUT_PREVIEW_CHARS = 120
#: Most items one page of the items list holds.
MAX_ITEMS_PAGE = 1_000
#: What `items(check=...)` accepts: promptlab.checks.validation.CheckStatus values.
CHECK_STATUSES = ("valid", "repaired", "invalid", "truncated", "no_schema")
#: The `results` columns in table order, as FinalRow takes them (key first).
_RESULT_COLUMNS = (
    "idempotency_key, run_id, seq, row_index, variant, repeat, status, error_kind, "
    "error_message, prompt_version_id, endpoint, model, params, output_text, input_tokens, "
    "output_tokens, finish_reason, model_version, latency_ms, cost_usd, attempts, finished_at, "
    "check_status, check_errors, rule_status, rule_errors, token_entropy, shard_id, "
    "coalesce(cache_hit, false)"
)
_ATTEMPT_COLUMNS = (
    "idempotency_key, run_id, attempt, started_at, ended_at, outcome, error_kind, http_status, "
    "error_message, wait_ms, wait_reason, retry_after_s, latency_ms, coalesce(reask, false)"
)


def item_page(
    cur: duckdb.DuckDBPyConnection,
    run_id: str,
    condition: str,
    args: list[Any],
    offset: int,
    limit: int,
) -> ItemPage:
    """One page of the items `condition` (from `item_filter`) keeps, with their count."""
    fetch_run(cur, run_id)  # an unknown run is an error, not an empty page
    total = cur.execute(f"SELECT count(*) FROM items i WHERE {condition}", args).fetchone()
    # The page's place first, over `seq` alone: an OFFSET deep into a million
    # items sorts one integer column (~6x faster than sorting the whole rows).
    seqs = [
        int(r[0])
        for r in cur.execute(
            f"SELECT i.seq FROM items i WHERE {condition} ORDER BY i.seq LIMIT ? OFFSET ?",
            [*args, limit, offset],
        ).fetchall()
    ]
    rows, finals = _page_rows(cur, run_id, seqs) if seqs else ([], {})
    page = [_item_row(r, finals.get(int(r[1]))) for r in rows]
    return ItemPage(rows=page, total=int(total[0]) if total else 0, offset=offset, limit=limit)


def fetch_item_detail(cur: duckdb.DuckDBPyConnection, run_id: str, key: str) -> ItemDetail:
    """One item with its dataset row, variant, final row and every attempt, read with `cur`."""
    fetch_run(cur, run_id)
    item = cur.execute(
        "SELECT seq, row_index, variant_index, repeat, status FROM items "
        "WHERE idempotency_key = ? AND run_id = ?",
        [key, run_id],
    ).fetchone()
    if item is None:
        raise NotFoundError(f"run {run_id} has no item {key!r}")
    seq, row_index, variant_index = int(item[0]), int(item[1]), int(item[2])
    row = cur.execute(
        "SELECT row_values FROM run_rows WHERE run_id = ? AND row_index = ?",
        [run_id, row_index],
    ).fetchone()
    # A replayed turn with the history it was sent with (its session's rows).
    values = row_with_history(cur, run_id, row_index, json.loads(row[0])) if row else {}
    variants = fetch_variants(cur, run_id, variant_index)
    final = cur.execute(
        f"SELECT {_RESULT_COLUMNS} FROM results "
        "WHERE run_id = ? AND seq = ? AND idempotency_key = ?",
        [run_id, seq, key],
    ).fetchone()
    attempts = cur.execute(
        f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE run_id = ? "
        "AND idempotency_key = ? ORDER BY attempt, started_at",
        [run_id, key],
    ).fetchall()
    return ItemDetail(
        run_id=run_id,
        key=key,
        seq=seq,
        row_index=row_index,
        repeat=int(item[3]),
        status=ItemStatus(item[4]),
        row=values,
        variant=variants[0],
        result=_final_row(final) if final else None,
        attempts=[AttemptRow(*a) for a in attempts],
    )


def _final_row(r: tuple[Any, ...]) -> FinalRow:
    return FinalRow(
        key=r[0],
        run_id=r[1],
        seq=int(r[2]),
        row_index=int(r[3]),
        variant=r[4],
        repeat=int(r[5]),
        status=r[6],
        error_kind=r[7],
        error_message=r[8],
        prompt_version_id=r[9],
        endpoint=r[10],
        model=r[11],
        params=json.loads(r[12]) if r[12] else {},
        output_text=r[13],
        input_tokens=r[14],
        output_tokens=r[15],
        finish_reason=r[16],
        model_version=r[17],
        latency_ms=r[18],
        cost_usd=r[19],
        attempts=int(r[20]),
        finished_at=r[21],
        check_status=r[22],
        check_errors=tuple(json.loads(r[23])) if r[23] else (),
        rule_status=r[24],
        rule_errors=tuple(json.loads(r[25])) if r[25] else (),
        token_entropy=r[26],
        shard_id=r[27],
        cache_hit=bool(r[28]),
    )


def item_filter(
    run_id: str,
    status: str | None,
    variant: str | None,
    error_kind: str | None,
    search: str | None,
    check: str | None,
) -> tuple[str, list[Any]]:
    """The WHERE condition over `items i` (and its parameters) of `ReadModels.items`."""
    where = ["i.run_id = ?"]
    args: list[Any] = [run_id]
    if status:
        if status not in set(ItemStatus):
            known = ", ".join(ItemStatus)
            raise PromptlabError(f"unknown item status {status!r}: one of {known}")
        where.append("i.status = ?")
        args.append(status)
    if variant:
        where.append(
            "i.variant_index = (SELECT variant_index FROM run_variants "
            "WHERE run_id = ? AND name = ?)"
        )
        args += [run_id, variant]
    if error_kind:
        where.append("i.error_kind = ?")
        args.append(error_kind)
    if check:
        if check not in CHECK_STATUSES:
            raise PromptlabError(
                f"unknown check status {check!r}: one of {', '.join(CHECK_STATUSES)}"
            )
        where.append("i.seq IN (SELECT seq FROM results WHERE run_id = ? AND check_status = ?)")
        args += [run_id, check]
    if search:
        needle = search.lower()
        where.append(
            "(starts_with(i.idempotency_key, ?) "
            "OR i.seq IN (SELECT seq FROM results WHERE run_id = ? AND "
            "(contains(lower(output_text), ?) OR contains(lower(error_message), ?))) "
            "OR i.row_index IN (SELECT row_index FROM run_rows WHERE run_id = ? "
            "AND contains(lower(row_values::VARCHAR), ?)))"
        )
        args += [needle, run_id, needle, needle, run_id, needle]
    return " AND ".join(where), args


def _page_rows(
    cur: duckdb.DuckDBPyConnection, run_id: str, seqs: list[int]
) -> tuple[list[tuple[Any, ...]], dict[int, tuple[Any, ...]]]:
    """The items of one page (`seqs`, not empty) and their results' fields by seq."""
    # Zone maps on `seq` find the page's row groups in both tables.
    bounds = [run_id, min(seqs), max(seqs), seqs]
    rows = cur.execute(
        "SELECT i.idempotency_key, i.seq, i.row_index, v.name, i.repeat, i.status, "
        "i.error_kind, i.attempts FROM items i JOIN run_variants v "
        "ON v.run_id = i.run_id AND v.variant_index = i.variant_index "
        "WHERE i.run_id = ? AND i.seq BETWEEN ? AND ? AND list_contains(?, i.seq) "
        "ORDER BY i.seq",
        bounds,
    ).fetchall()
    finals = {
        int(f[0]): f
        for f in cur.execute(
            f"SELECT seq, latency_ms, left(output_text, {OUTPUT_PREVIEW_CHARS}), "
            "finished_at, check_status FROM results "
            "WHERE run_id = ? AND seq BETWEEN ? AND ? "
            "AND list_contains(?, seq)",
            bounds,
        ).fetchall()
    }
    return rows, finals


def _item_row(r: tuple[Any, ...], f: tuple[Any, ...] | None) -> ItemRow:
    """One row of the items list: the item `r`, with its result's fields `f` if any."""
    return ItemRow(
        key=r[0],
        seq=int(r[1]),
        row_index=int(r[2]),
        variant=r[3],
        repeat=int(r[4]),
        status=ItemStatus(r[5]),
        error_kind=r[6],
        attempts=int(r[7]),
        latency_ms=f[1] if f else None,
        output_preview=f[2] if f else None,
        finished_at=f[3] if f else None,
        check_status=f[4] if f else None,
    )
