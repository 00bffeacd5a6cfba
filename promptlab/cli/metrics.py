"""`promptlab metrics` and `promptlab compare`: what versions and variants add up to.

The facade is imported inside the commands (it brings DuckDB): `--help` stays light.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from promptlab.cli.common import calls, db_option, handle_errors, route, with_query
from promptlab.cli.metrics_json import comparison_json, log_metrics_json, metrics_json
from promptlab.cli.metrics_tables import (
    checks_table,
    comparison_table,
    feedback_table,
    logs_table,
    metrics_table,
    scores_table,
    sessions_table,
    srm_line,
)
from promptlab.views.compare import answer_sentences, units_needed, units_needed_text

if TYPE_CHECKING:
    from promptlab.analysis.compare import Comparison
    from promptlab.records import LogMetricsRow, MetricsRow, ScoreCounts
    from promptlab.records.afterrun import AfterRunRecord
    from promptlab.records.sessions import SessionMetrics


@click.command("metrics")
@db_option
@click.option("--run", "run_id", help="One run: a row per variant.")
@click.option("--prompt", help="Only this prompt's versions (a row per version and model).")
@click.option("--since", help="Only results finished since: 7d, 24h, 30m, 2w or a date.")
@click.option(
    "--live",
    "--logs",
    "logs_only",
    is_flag=True,
    help="Production requests instead (live gateway calls and imported logs, with their "
    "feedback events): a row per version. --logs is the same.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_context
@handle_errors
def metrics_command(
    ctx: click.Context,
    run_id: str | None,
    prompt: str | None,
    since: str | None,
    logs_only: bool,
    as_json: bool,
) -> None:
    """Completion, CTR, failures, latency percentiles, tokens and cost per version or variant.

    `promptlab metrics --prompt NAME --since 7d`: each version of NAME over the last week,
    from results (with their feedback) and from the production logs.
    """
    if logs_only and run_id is not None:
        raise click.UsageError("--live reads production requests, not a run: drop --run")
    rows, log_rows, scores, sessions = _read(ctx, run_id, prompt, since, logs_only)
    after_run = [] if logs_only else _after_run_failures(ctx, run_id)
    scores = [s for s in scores if run_id or prompt is None or s.label.startswith(f"{prompt}@")]
    if logs_only:
        _echo_logs(log_rows, since, as_json)
    elif as_json:
        click.echo(json.dumps([metrics_json(r, scores) for r in rows], indent=2))
    elif not rows and not log_rows:
        click.echo("no results" + (f" since {since}" if since else ""))
    else:
        _echo_report(rows, log_rows, scores, sessions, after_run)


def _echo_logs(log_rows: list[LogMetricsRow], since: str | None, as_json: bool) -> None:
    """`metrics --live`: production requests alone."""
    if as_json:
        click.echo(json.dumps([log_metrics_json(r) for r in log_rows], indent=2))
    elif not log_rows:
        click.echo("no production logs" + (f" since {since}" if since else ""))
    else:
        for line in logs_table(log_rows):
            click.echo(line)


def _echo_report(
    rows: list[MetricsRow],
    log_rows: list[LogMetricsRow],
    scores: list[ScoreCounts],
    sessions: list[SessionMetrics],
    after_run: list[AfterRunRecord],
) -> None:
    """`metrics` as text: failed after-run work first, then each table that has rows."""
    if after_run:
        click.echo("after-run work that failed (scores or judges above may be missing):")
        for record in after_run:
            click.echo(f"  run {record.run_id}: {record.line}")
    if rows:
        for line in metrics_table(rows):
            click.echo(line)
    if any(r.checked for r in rows):
        click.echo("output checks (shares of the checked outputs):")
        for line in checks_table(rows):
            click.echo(line)
    for r in rows:
        if r.failed_by_kind:
            kinds = ", ".join(f"{k}={n}" for k, n in sorted(r.failed_by_kind.items()))
            click.echo(f"failures {r.label} ({r.model}): {kinds}")
    if scores:
        click.echo("scores against expected answers (mean; an accuracy when each is right or")
        click.echo("wrong; 95% interval, Wilson's for an accuracy):")
        for line in scores_table(scores):
            click.echo(line)
    for line in sessions_table(sessions):
        click.echo(line)
    if any(r.impressions or r.thumbs_up or r.thumbs_down for r in rows):
        click.echo("feedback (CTR: clicks over impressions):")
        for line in feedback_table(rows):
            click.echo(line)
    if log_rows:
        click.echo("production logs:")
        for line in logs_table(log_rows):
            click.echo(line)


def _read(
    ctx: click.Context, run_id: str | None, prompt: str | None, since: str | None, logs_only: bool
) -> tuple[list[MetricsRow], list[LogMetricsRow], list[ScoreCounts], list[SessionMetrics]]:
    """What `metrics` prints, from the database or the server's typed routes."""
    from promptlab.records import LogMetricsRow, MetricsRow, ScoreCounts
    from promptlab.records.sessions import SessionMetrics

    rows: list[MetricsRow] = []
    log_rows: list[LogMetricsRow] = []
    scores: list[ScoreCounts] = []
    sessions: list[SessionMetrics] = []
    with calls(ctx) as call:
        if not logs_only:
            path = with_query("/v1/analysis/metrics", run_id=run_id, prompt=prompt, since=since)
            rows = call(
                list[MetricsRow],
                "GET",
                path,
                lambda wb: wb.analysis.metrics(run_id=run_id, prompt=prompt, since=since),
            )
        if run_id is None:
            path = with_query("/v1/analysis/log-metrics", prompt=prompt, since=since)
            log_rows = call(
                list[LogMetricsRow],
                "GET",
                path,
                lambda wb: wb.analysis.log_metrics(prompt=prompt, since=since),
            )
        if not (logs_only or since):
            path = with_query("/v1/analysis/scores", run_id=run_id)
            scores = call(list[ScoreCounts], "GET", path, lambda wb: wb.analysis.scores(run_id))
        if run_id and not logs_only:
            path = route("/v1/runs/{run_id}/sessions", run_id=run_id)
            sessions = call(
                list[SessionMetrics], "GET", path, lambda wb: wb.analysis.sessions(run_id)
            )
    return rows, log_rows, scores, sessions


def _after_run_failures(ctx: click.Context, run_id: str | None) -> list[AfterRunRecord]:
    """After-run work that failed (of the run, or of the latest runs)."""
    from promptlab.records.afterrun import AfterRunRecord

    path = with_query("/v1/analysis/after-run-failures", run_id=run_id)
    with calls(ctx) as call:
        return call(
            list[AfterRunRecord], "GET", path, lambda wb: wb.analysis.after_run_failures(run_id)
        )


@click.command("compare")
@db_option
@click.option("--run", "run_id", help="The run whose variants (or versions) are compared.")
@click.option("--logs", is_flag=True, help="Compare two versions in the production logs.")
@click.option("--since", help="Versions: only results or requests since 7d, 24h or a date.")
@click.argument("variants", nargs=-1)
@click.option(
    "--mde",
    type=click.FloatRange(min=0, min_open=True, max=50),
    metavar="PP",
    help="Also say how many units per arm detect a change of PP percentage points "
    "in control's completion rate (alpha 0.05, power 80%).",
)
@click.option(
    "--live/--final",
    "sequential",
    default=None,
    help="Still collecting (--live: always-valid mSPRT at 1% of the 5%, safe to look again "
    "and again) or the final look (--final: fixed-horizon tests at the other 4%). Default: "
    "live while a run is unfinished and for production logs, final otherwise.",
)
@click.option(
    "--planned-units",
    type=click.IntRange(min=1),
    metavar="N",
    help="Units per arm the comparison will end at: the always-valid test is tuned to "
    "be sharpest there. Default: what the run plans; 1,000 for production logs.",
)
@click.option(
    "--cuped",
    is_flag=True,
    help="With --logs and --since: use each unit's logs before --since as a covariate "
    "(CUPED), for narrower intervals on completion and CTR.",
)
@click.option(
    "--keep-shared",
    is_flag=True,
    help="Keep units seen under both arms (left out by default: a unit must see one "
    "version, and one in both samples ties the arms together).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_context
@handle_errors
def compare_command(
    ctx: click.Context,
    run_id: str | None,
    logs: bool,
    since: str | None,
    variants: tuple[str, ...],
    mde: float | None,
    sequential: bool | None,
    planned_units: int | None,
    cuped: bool,
    keep_shared: bool,
    as_json: bool,
) -> None:
    """Each variant of a run against control (`--run RUN [VARIANT_A VARIANT_B]`), or
    version REF_B against REF_A (`REF_A REF_B [--run RUN | --logs] [--since DATE]`).

    Completion rate, CTR (with feedback) and latency p50/p90/p99, analysed per unit
    (the split's unit, the logs' unit_id; per request when rows name none): the delta,
    its interval and the p-value of the same method (99% while collecting, 96% at the
    final look), Holm's adjusted p-value over the declared metrics, the verdict and why;
    for a split run, the SRM check. Fewer than 20 units in an arm give "too few units".
    Versions are references (name@1.2.0, name@label) or ids.
    """
    if len(variants) not in (0, 2):
        raise click.UsageError("give two variants or versions (A B), or none with --run")
    by_version = len(variants) == 2 and all(_is_version_ref(v) for v in variants)
    if run_id is None and not by_version:
        raise click.UsageError("give --run RUN, or two versions (REF_A REF_B, as name@version)")
    if (logs or since) and not by_version:
        raise click.UsageError("--logs and --since compare two versions: give REF_A REF_B")
    if cuped and not (logs and since):
        raise click.UsageError("--cuped needs --logs and --since (the pre-period is before it)")
    comparison = _comparison(
        ctx,
        run_id,
        variants,
        by_version,
        logs,
        since,
        (sequential, planned_units),
        (cuped, keep_shared),
    )
    needed = units_needed(comparison, mde) if mde is not None else None
    if as_json:
        click.echo(json.dumps({**comparison_json(comparison), "units_needed": needed}, indent=2))
        return
    _print_comparison(comparison, needed)


def _print_comparison(comparison: Comparison, needed: dict[str, Any] | None) -> None:
    """The comparison as text: where it comes from and how it was analysed, its notes,
    the answer in sentences, the table, the SRM check and the units `--mde` needs."""
    kind = "paired tests" if comparison.paired else "independent samples"
    where = f"run {comparison.run_id}" if comparison.run_id else "versions"
    source = {"logs": "production logs", "versions": "results across runs"}.get(
        comparison.mode, f"{comparison.mode} mode"
    )
    click.echo(f"{where}: {source} ({kind}), control {comparison.control}, {comparison.method}")
    click.echo(comparison.family.describe())
    if comparison.scope:
        click.echo(comparison.scope)
    for note in comparison.notes:
        click.echo(f"note: {note}")
    for sentence in answer_sentences(comparison):
        click.echo(sentence)
    for line in comparison_table(comparison.rows):
        click.echo(line)
    if comparison.srm is not None:
        click.echo(srm_line(comparison))
    if needed is not None:
        click.echo(f"sample size: {units_needed_text(needed)}")


def _comparison(
    ctx: click.Context,
    run_id: str | None,
    variants: tuple[str, ...],
    by_version: bool,
    logs: bool,
    since: str | None,
    looks: tuple[bool | None, int | None],
    flags: tuple[bool, bool],
) -> Comparison:
    """The comparison asked for, from the database or the server's typed route; `looks`:
    (live or final, the planned units per arm); `flags`: (CUPED, keep shared units)."""
    from promptlab.analysis.compare import Comparison

    a, b = variants if variants else (None, None)
    sequential, planned = looks
    cuped, keep_shared = flags
    with calls(ctx) as call:
        if by_version:
            assert a is not None and b is not None
            options: dict[str, Any] = {
                "run_id": run_id,
                "logs": logs,
                "since": since,
                "sequential": sequential,
                "cuped": cuped,
                "planned_units": planned,
                "keep_shared": keep_shared,
            }
            path = with_query("/v1/analysis/compare", a=a, b=b, **options)
            return call(
                Comparison, "GET", path, lambda wb: wb.analysis.compare_versions(a, b, **options)
            )
        assert run_id is not None
        path = with_query(
            route("/v1/runs/{run_id}/comparison", run_id=run_id),
            a=a,
            b=b,
            sequential=sequential,
            planned_units=planned,
            keep_shared=keep_shared,
        )
        return call(
            Comparison,
            "GET",
            path,
            lambda wb: wb.analysis.compare(run_id, a, b, sequential, planned, keep_shared),
        )


def _is_version_ref(text: str) -> bool:
    """A prompt version reference (name@...) or id, not a variant name."""
    return "@" in text or text.startswith("sha256:")


commands: list[click.Command] = [metrics_command, compare_command]
