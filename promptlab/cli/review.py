"""`promptlab review list|show|accept|correct|reject|reopen|add|export`: the review queue.

Rows reach the queue from cross-checks (decision `review`), from `review add` (by
hand, results that failed their checks, or an anomaly alert's results); every decision
is recorded in the audit trail with who made it. Each item has a version: a decision
made on a version someone has changed since, or on a settled item, is refused; `review
reopen` opens a settled item again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench, served, through
from promptlab.data.export import NEUTRALISED_HELP, RAW_HELP

if TYPE_CHECKING:
    from promptlab.records.review import ReviewItem
    from promptlab.workbench import Workbench

# As promptlab.records.review.ReviewStatus, spelled out: `--help` imports no records.
STATUSES = ["open", "accepted", "corrected", "rejected", "all"]


@click.group("review")
def review() -> None:
    """Rows sent to a person: list them, see the models' answers, settle each one.

    Accept the proposed answer, correct it, or reject the row; a settled row is changed
    only after `review reopen`. `review export FILE` writes the settled answers as a
    dataset of expected answers for the next run.
    """


@review.command("list")
@db_option
@click.option("--status", type=click.Choice(STATUSES), default="open", show_default=True)
@click.option("--run", "run_id", help="Only this run's items.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.pass_context
@handle_errors
def list_items(ctx: click.Context, status: str, run_id: str | None, limit: int) -> None:
    """Items oldest first: id, run, row, what sent it, and the proposed answer."""
    from promptlab.records.review import ReviewList
    from promptlab.views.review import item_rows

    def direct(wb: Workbench) -> ReviewList:
        return wb.review.list(
            None if status == "all" else status, run_id, limit
        ), wb.review.counts()

    query = urlencode({"status": status, **({"run_id": run_id} if run_id else {}), "limit": limit})
    items, counts = through(ctx, ReviewList, "GET", f"/v1/review/items?{query}", direct)  # type: ignore[arg-type]
    if not items:
        click.echo(f"no {'' if status == 'all' else status + ' '}review items")
    for row in item_rows(items):
        answer = f"  -> {row['answer']!r}" if row["answer"] is not None else ""
        click.echo(
            f"{row['id']}  {row['run']} row {row['row']}  {row['source']}  "
            f"{row['status']} v{row['version']}  "
            f"proposed {row['proposed']!r}{answer}"
        )
        click.echo(f"    {row['reason']}")
    click.echo("  ".join(f"{s} {counts.get(s, 0)}" for s in STATUSES[:-1]), err=True)


@review.command("show")
@db_option
@click.argument("item_id", type=int)
@click.pass_context
@handle_errors
def show(ctx: click.Context, item_id: int) -> None:
    """The item, its dataset row, and every model's answer with its scores."""
    from promptlab.records.review import ReviewDetail
    from promptlab.views.review import detail_lines

    path = f"/v1/review/items/{item_id}"
    detail = through(ctx, ReviewDetail, "GET", path, lambda wb: wb.review.show(item_id))
    click.echo("\n".join(detail_lines(detail)))


def expect_version_option(func: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--expect-version",
        "version",
        type=click.IntRange(min=0),
        metavar="N",
        help="The item's version you saw (`review show` prints it): refused if anyone "
        "changed the item since. Default: the item as it is now.",
    )(func)


@review.command("accept")
@db_option
@click.argument("item_id", type=int)
@click.option("--note", help="Why (kept with the decision).")
@expect_version_option
@click.pass_context
@handle_errors
def accept(ctx: click.Context, item_id: int, note: str | None, version: int | None) -> None:
    """Settle an open item on the proposed answer (a settled one: reopen it first)."""
    item = _decide(
        ctx,
        item_id,
        "accept",
        {"note": note, "version": version},
        lambda wb: wb.review.accept(item_id, note, version=version),
    )
    click.echo(f"review {item.id}: accepted {item.answer!r} (version {item.version})")


@review.command("correct")
@db_option
@click.argument("item_id", type=int)
@click.argument("answer")
@click.option("--note", help="Why (kept with the decision).")
@expect_version_option
@click.pass_context
@handle_errors
def correct(
    ctx: click.Context, item_id: int, answer: str, note: str | None, version: int | None
) -> None:
    """Settle an open item on ANSWER instead of the proposed one."""
    body = {"note": note, "version": version, "answer": answer}

    def direct(wb: Workbench) -> ReviewItem:
        return wb.review.correct(item_id, answer, note, version=version)

    item = _decide(ctx, item_id, "correct", body, direct)
    click.echo(f"review {item.id}: corrected to {item.answer!r} (version {item.version})")


@review.command("reject")
@db_option
@click.argument("item_id", type=int)
@click.option("--note", help="Why (kept with the decision).")
@expect_version_option
@click.pass_context
@handle_errors
def reject(ctx: click.Context, item_id: int, note: str | None, version: int | None) -> None:
    """Keep an open item's row out of the expected answers."""
    item = _decide(
        ctx,
        item_id,
        "reject",
        {"note": note, "version": version},
        lambda wb: wb.review.reject(item_id, note, version=version),
    )
    click.echo(f"review {item.id}: rejected (version {item.version})")


@review.command("reopen")
@db_option
@click.argument("item_id", type=int)
@click.option("--note", help="Why (kept in the audit trail with the reopen).")
@expect_version_option
@click.pass_context
@handle_errors
def reopen(ctx: click.Context, item_id: int, note: str | None, version: int | None) -> None:
    """Open a settled item again so it can be decided anew (the audit trail keeps the
    decision it clears)."""
    item = _decide(
        ctx,
        item_id,
        "reopen",
        {"note": note, "version": version},
        lambda wb: wb.review.reopen(item_id, note, version=version),
    )
    click.echo(f"review {item.id}: open again (version {item.version})")


@review.command("add")
@db_option
@click.argument("run_id")
@click.argument("rows", nargs=-1, type=click.IntRange(min=1))
@click.option("--failed-checks", is_flag=True, help="Every result that failed its checks.")
@click.option("--alerts", is_flag=True, help="The results the run's anomaly alerts were about.")
@click.option("--reason", default="sent by hand", show_default=True)
@click.pass_context
@handle_errors
def add(
    ctx: click.Context,
    run_id: str,
    rows: tuple[int, ...],
    failed_checks: bool,
    alerts: bool,
    reason: str,
) -> None:
    """Send rows of a run to review: ROWS by number, from 1 as `promptlab items` and the
    app number them, or with --failed-checks / --alerts."""
    if not rows and not failed_checks and not alerts:
        raise click.UsageError("give row numbers, --failed-checks or --alerts")
    indexes = [row - 1 for row in rows]  # the API and wb.review.add take row_index, from 0

    def direct(wb: Workbench) -> list[int]:
        ids = wb.review.add(run_id, indexes, reason) if indexes else []
        if failed_checks:
            ids += wb.review.add_failed_checks(run_id)
        if alerts:
            ids += wb.review.add_alerted(run_id)
        return ids

    body = {
        "run_id": run_id,
        "rows": indexes,
        "failed_checks": failed_checks,
        "alerts": alerts,
        "reason": reason,
    }
    ids = through(ctx, list[int], "POST", "/v1/review/add", direct, body)
    click.echo(
        f"sent {len(ids)} row(s) to review"
        + (
            f": {ids[0]}..{ids[-1]}"
            if ids
            else " (none new: rows already in the queue stay as they are)"
        )
    )


@review.command("export", epilog=NEUTRALISED_HELP + " See --raw.")
@db_option
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--run", "run_id", help="Only this run's items.")
@click.option(
    "--column",
    default="expected",
    show_default=True,
    help="The column holding each settled answer.",
)
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
@click.pass_context
@handle_errors
def export(
    ctx: click.Context, file: Path, run_id: str | None, column: str, force: bool, raw: bool
) -> None:
    """Write accepted and corrected answers as a dataset (.jsonl or .csv): each row as
    it was, with its answer in --column, ready for `expected:` in the next spec."""
    server = served(ctx)
    if server is not None:  # a job on the server; its file is written here
        from promptlab.server.client import ServerClient

        body = {"file_name": str(file), "column": column, "raw": raw, "run_id": run_id}
        client = ServerClient(server)
        count = client.job_file("/v1/jobs/review-exports", body, file, force=force)
    else:
        with open_workbench(ctx) as wb:
            count = wb.review.export(file, run_id=run_id, column=column, force=force, raw=raw)
    click.echo(f"wrote {count} row(s) to {file}")


def _decide(
    ctx: click.Context,
    item_id: int,
    decision: str,
    body: dict[str, Any],
    direct: Callable[[Workbench], ReviewItem],
) -> ReviewItem:
    from promptlab.records.review import ReviewItem

    path = f"/v1/review/items/{item_id}/{decision}"
    return through(ctx, ReviewItem, "POST", path, direct, body)


commands: list[click.Command] = [review]
