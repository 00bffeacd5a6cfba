"""`promptlab status RUN_ID --items / --item KEY`: a run's items as text.

The lines are built here and printed by `status`; everything comes from the facade
(`wb.runs.items`, `wb.runs.item`), or from the typed routes of the server that owns
the database (`GET /v1/runs/{run_id}/items`, `.../items/{key}`): the same records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from promptlab.cli.common import route, through, with_query

if TYPE_CHECKING:
    from promptlab.records import ItemPage
    from promptlab.views.item import ItemView

#: Hex digits of a key the items list shows: unique in practice, and `--item` takes it.
SHORT_KEY = 12
#: Characters of an output the items list shows on its line.
PREVIEW_CHARS = 60


def read_items(
    ctx: click.Context, run_id: str, filters: Mapping[str, str | None], offset: int, limit: int
) -> ItemPage:
    """A page of the run's items matching `filters` (status, variant, error kind, check,
    search), from the database or the server."""
    from promptlab.records import ItemPage

    status, variant, kind, check, search = (
        filters.get(k) for k in ("status", "variant", "error kind", "check", "search")
    )
    path = with_query(
        route("/v1/runs/{run_id}/items", run_id=run_id),
        status=status,
        variant=variant,
        error_kind=kind,
        search=search,
        check=check,
        offset=offset,
        limit=limit,
    )
    return through(
        ctx,
        ItemPage,
        "GET",
        path,
        lambda wb: wb.runs.items(
            run_id,
            status=status,
            variant=variant,
            error_kind=kind,
            search=search,
            check=check,
            offset=offset,
            limit=limit,
        ),
    )


def read_item(ctx: click.Context, run_id: str, key: str) -> ItemView:
    """One item (its key or 8+ hex digits of it), from the database or the server."""
    from promptlab.views.item import ItemView

    path = route("/v1/runs/{run_id}/items/{key}", run_id=run_id, key=key)
    return through(ctx, ItemView, "GET", path, lambda wb: wb.runs.item(run_id, key))


def items_lines(run_id: str, page: ItemPage, filters: Mapping[str, str | None]) -> list[str]:
    """The page as an aligned table under a line saying which items these are."""
    given = ", ".join(f"{k}={v}" for k, v in filters.items() if v)
    where = f" ({given})" if given else ""
    if not page.rows:
        return [f"run {run_id}: no items{where}" + (f" after {page.offset}" if page.offset else "")]
    first = page.offset + 1
    lines = [f"run {run_id}: items {first}-{page.offset + len(page.rows)} of {page.total}{where}"]
    header = (
        "key",
        "row",
        "variant",
        "repeat",
        "status",
        "error",
        "check",
        "tries",
        "ms",
        "output",
    )
    rows: list[tuple[str, ...]] = [header]
    for r in page.rows:
        rows.append(
            (
                r.key[:SHORT_KEY],
                str(r.row_index + 1),
                r.variant,
                str(r.repeat),
                r.status,
                r.error_kind or "-",
                r.check_status or "-",
                str(r.attempts),
                f"{r.latency_ms:.0f}" if r.latency_ms is not None else "-",
                _one_line(r.output_preview or "", PREVIEW_CHARS) or "-",
            )
        )
    return lines + table(rows, right={1, 3, 7, 8})


def item_lines(view: ItemView) -> list[str]:
    """Inputs, messages, params, output, error and every attempt of one item."""
    d, v, r = view.detail, view.variant, view.result
    lines = [
        f"item {view.key} of run {view.run_id}: {view.status}",
        f"  dataset row {d.row_index + 1}, variant {v.name} ({v.prompt_ref}, "
        f"{v.prompt_version_id[:19]}), repeat {d.repeat}",
        f"  model {v.endpoint}:{v.model}",
        f"  params {json.dumps(dict(view.params), sort_keys=True)}",
        "inputs:",
    ]
    lines += [f"  {name}: {_value(value)}" for name, value in view.row.items()] or ["  (none)"]
    if view.messages is not None:
        lines.append("messages:")
        for message in view.messages:
            lines.append(f"  [{message['role']}]")
            lines += _indented(message["content"], "    ")
    else:
        lines += ["render error (the item was not sent):", f"  {view.render_error}"]
    if view.output_text is not None:
        lines.append("output:")
        parsed = view.output_json
        text = view.output_text if parsed is None else json.dumps(parsed, indent=2)
        lines += _indented(text, "  ")
    if view.check_status is not None:
        lines.append(f"check: {view.check_status}")
        lines += [f"  {error}" for error in view.check_errors]
    if view.rule_status is not None:
        lines.append(f"rules: {view.rule_status}")
        lines += [f"  {error}" for error in view.rule_errors]
    if view.error is not None:
        kind, why = view.error
        lines.append(f"error: {kind + ': ' if kind else ''}{why}")
    if r is not None and r.status == "succeeded":
        lines.append(
            f"usage: tokens in {r.input_tokens} out {r.output_tokens}, "
            f"cost ${r.cost_usd or 0:.6f}, finish {r.finish_reason}, "
            f"model {r.model_version}, latency {_ms(r.latency_ms)} ms"
        )
        if r.cache_hit:
            lines.append("answered from the response cache: not sent, cost $0")
    if r is not None:
        lines.append(f"finished: {r.finished_at:%Y-%m-%d %H:%M:%S}")
    lines.append(f"attempts: {len(view.attempts)}")
    return lines + _attempt_lines(view)


def _attempt_lines(view: ItemView) -> list[str]:
    """Every attempt of the item as an indented table (none: no lines)."""
    if not view.attempts:
        return []
    rows: list[tuple[str, ...]] = [
        (
            "#",
            "started",
            "outcome",
            "kind",
            "http",
            "wait ms",
            "waited for",
            "retry-after s",
            "latency ms",
            "message",
        ),
    ]
    for a in view.attempts:
        rows.append(
            (
                str(a.attempt),
                f"{a.started_at:%H:%M:%S.%f}"[:-3],
                a.outcome + (" (re-ask)" if a.reask else ""),
                a.error_kind or "-",
                str(a.http_status) if a.http_status is not None else "-",
                f"{a.wait_ms:.0f}",
                a.wait_reason or "-",
                f"{a.retry_after_s:g}" if a.retry_after_s is not None else "-",
                _ms(a.latency_ms),
                _one_line(a.error_message or "", 80) or "-",
            )
        )
    return ["  " + line for line in table(rows, right={0, 4, 5, 7, 8})]


def table(rows: Sequence[tuple[str, ...]], right: set[int]) -> list[str]:
    """Rows as aligned columns (the first row is the header); `right` columns align right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("\n", "\n    ")  # a multi-line cell stays under its name


def _indented(text: str, prefix: str) -> list[str]:
    return [prefix + line for line in text.splitlines()] or [prefix]


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _ms(value: float | None) -> str:
    return f"{value:.0f}" if value is not None else "-"
