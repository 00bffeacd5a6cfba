"""`promptlab repeats RUN_ID [--json]`: what a run's repeats say per variant."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from promptlab.cli.common import calls, db_option, handle_errors, route

if TYPE_CHECKING:  # `promptlab --help` imports no more than it needs
    from promptlab.records.repeats import RepeatsReport, VariantRepeats

_HEADER = (
    f"{'variant':<16} {'temp':>5} {'top_p':>5} {'rows':>4} {'perplexity':>10} "
    f"{'exact':>6} {'same':>5} {'complete':>8} {'latency sd':>10} {'tokens sd':>9}"
)


@click.command("repeats")
@db_option
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.pass_context
@handle_errors
def repeats_command(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """What repeats of each row say, per variant of RUN_ID.

    perplexity: exp(-mean log-probability) of the output tokens (token-weighted; "-"
    when the endpoint gave none). exact: mean over rows of the share of repeat pairs
    with identical output; same: share of rows whose repeats all agree; complete: mean
    share of repeat pairs agreeing on completion; latency sd and tokens sd: mean over
    rows of the standard deviation across a row's repeats. By field: per JSON field,
    the mean share of repeat pairs with equal values.
    """
    from promptlab.records.repeats import RepeatsReport

    path = route("/v1/runs/{run_id}/repeats", run_id=run_id)
    with calls(ctx) as call:
        report = call(RepeatsReport, "GET", path, lambda wb: wb.analysis.repeats(run_id))
    if as_json:
        click.echo(json.dumps(report_json(report), indent=2))
        return
    for line in report_lines(report):
        click.echo(line)


def report_json(report: RepeatsReport) -> dict[str, object]:
    from promptlab.analysis.repeats import describe

    return {
        "run_id": report.run_id,
        "repeats": report.repeats,
        "variants": [describe(v) for v in report.variants],
    }


def _number(value: float | None, digits: int = 2, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


def variant_line(v: VariantRepeats) -> str:
    return (
        f"{v.variant[:16]:<16} {_number(v.temperature_mean):>5} {_number(v.top_p_mean):>5} "
        f"{v.rows:>4} {_number(v.perplexity):>10} {_number(v.exact_agreement):>6} "
        f"{_number(v.rows_identical):>5} {_number(v.completion_agreement):>8} "
        f"{_number(v.latency_spread_ms, 0, ' ms'):>10} {_number(v.tokens_spread, 1):>9}"
    )


def report_lines(report: RepeatsReport) -> list[str]:
    if not report.variants:
        return [f"run {report.run_id}: no results yet"]
    lines = [
        f"run {report.run_id}: {report.repeats} repeat(s) a row; per variant, mean over rows "
        "of what the row's repeats say",
        _HEADER,
        *(variant_line(v) for v in report.variants),
    ]
    if report.repeats < 2:
        lines.append("  one repeat a row: nothing to compare across repeats (`repeats: 4`)")
        return lines
    fielded = [v for v in report.variants if v.field_agreement]
    if fielded:
        lines.append("by field (mean share of repeat pairs with equal values):")
        for v in fielded:
            shares = ", ".join(f"{k} {s:.2f}" for k, s in v.field_agreement.items())
            lines.append(f"  {v.variant}: {shares}")
    return lines


commands: list[click.Command] = [repeats_command]
