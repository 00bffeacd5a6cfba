"""`promptlab metrics` and `promptlab compare`: what versions and variants add up to.

The facade is imported inside the commands (it brings DuckDB): `--help` stays light.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench
from promptlab.compareview import (
    COMPARISON_COLUMNS,
    comparison_cells,
    fmt_ms,
    fmt_pct,
    srm_figures,
    units_needed,
    units_needed_text,
)

if TYPE_CHECKING:
    from promptlab.workbench import Comparison, MetricComparison, MetricsRow


@click.command("metrics")
@db_option
@click.option("--run", "run_id", help="One run: a row per variant.")
@click.option("--prompt", help="Only this prompt's versions (a row per version and model).")
@click.option("--since", help="Only results finished since: 7d, 24h, 30m, 2w or a date.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.pass_context
@handle_errors
def metrics_command(
    ctx: click.Context, run_id: str | None, prompt: str | None, since: str | None, as_json: bool
) -> None:
    """Completion, failures, latency percentiles, tokens and cost per version or variant.

    `promptlab metrics --prompt NAME --since 7d`: each version of NAME over the last week.
    """
    with open_workbench(ctx) as wb:
        rows = wb.metrics(run_id=run_id, prompt=prompt, since=since)
    if as_json:
        click.echo(json.dumps([metrics_json(r) for r in rows], indent=2))
        return
    if not rows:
        click.echo("no results" + (f" since {since}" if since else ""))
        return
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


@click.command("compare")
@db_option
@click.option("--run", "run_id", required=True, help="The run whose variants are compared.")
@click.argument("variants", nargs=-1)
@click.option(
    "--mde", type=click.FloatRange(min=0, min_open=True, max=50), metavar="PP",
    help="Also say how many units per arm detect a change of PP percentage points "
    "in control's completion rate (alpha 0.05, power 80%).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_context
@handle_errors
def compare_command(
    ctx: click.Context, run_id: str, variants: tuple[str, ...], mde: float | None, as_json: bool
) -> None:
    """Each variant of a run against control (or VARIANT_B against VARIANT_A).

    Completion rate and latency p50/p90/p99: the delta, its 95% interval, the p-value,
    Holm's adjusted p-value, the test and a verdict; for a split run, the SRM check.
    """
    if len(variants) not in (0, 2):
        raise click.UsageError("give two variants (VARIANT_A VARIANT_B) or none")
    a, b = variants if variants else (None, None)
    with open_workbench(ctx) as wb:
        comparison = wb.compare(run_id, a, b)
    needed = units_needed(comparison, mde) if mde is not None else None
    if as_json:
        click.echo(json.dumps({**comparison_json(comparison), "units_needed": needed}, indent=2))
        return
    kind = "paired tests" if comparison.paired else "independent samples"
    click.echo(
        f"run {comparison.run_id}: {comparison.mode} mode ({kind}), control {comparison.control}"
    )
    for line in comparison_table(comparison.rows):
        click.echo(line)
    if comparison.srm is not None:
        click.echo(srm_line(comparison))
    if needed is not None:
        click.echo(f"sample size: {units_needed_text(needed)}")


def aligned(rows: list[tuple[str, ...]], left: set[int]) -> list[str]:
    """Rows as text columns: the columns in `left` left-aligned (names), the rest right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) if i in left else c.rjust(w)
                  for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]  # fmt: skip


def metrics_table(rows: list[MetricsRow]) -> list[str]:
    header = ("variant" if rows[0].variant is not None else "version", "model", "items", "ok",
              "failed", "complete", "95% interval", "mean ms", "p50 ms", "p90 ms", "p95 ms",
              "p99 ms", "tokens", "cost $")  # fmt: skip
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        ci = r.completion_interval
        table.append(
            (
                r.label,
                r.model,
                str(r.finished),
                str(r.succeeded),
                str(r.failed),
                fmt_pct(r.completion_rate),
                f"{ci.low:.1%}-{ci.high:.1%}" if r.finished else "-",
                fmt_ms(r.latency_mean_ms),
                fmt_ms(r.latency_p50_ms),
                fmt_ms(r.latency_p90_ms),
                fmt_ms(r.latency_p95_ms),
                fmt_ms(r.latency_p99_ms),
                str(r.input_tokens + r.output_tokens),
                f"{r.cost_usd:.4f}",
            )  # fmt: skip
        )
    return aligned(table, {0, 1})


def checks_table(rows: list[MetricsRow]) -> list[str]:
    """Validity, repair, invalid, truncation and rule-failure rates of rows with checks."""
    header = ("variant" if rows[0].variant is not None else "version", "model", "checked",
              "valid", "repaired", "invalid", "truncated", "rule failed")  # fmt: skip
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        if r.checked:
            table.append((r.label, r.model, str(r.checked), fmt_pct(r.validity_rate),
                          fmt_pct(r.repair_rate), fmt_pct(r.invalid_rate),
                          fmt_pct(r.truncation_rate), fmt_pct(r.rule_failure_rate)))  # fmt: skip
    return aligned(table, {0, 1})


def comparison_table(rows: list[MetricComparison]) -> list[str]:
    table: list[tuple[str, ...]] = [COMPARISON_COLUMNS]
    table += [comparison_cells(r) for r in rows]
    return aligned(table, {0, 1, 8, 9})


def srm_line(comparison: Comparison) -> str:
    srm = comparison.srm
    assert srm is not None
    figures = srm_figures(srm)
    if srm.mismatch:
        return (
            f"!! SAMPLE RATIO MISMATCH: {figures}. The split did not follow the weights: "
            "fix the assignment before trusting this comparison."
        )
    return f"SRM check: ok ({figures})"


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


def metrics_json(row: MetricsRow) -> dict[str, Any]:
    out = _plain(asdict(row))
    ci = row.completion_interval
    out.update(
        completion_rate=row.completion_rate,
        completion_low=ci.low if row.finished else None,
        completion_high=ci.high if row.finished else None,
        validity_rate=row.validity_rate,
        repair_rate=row.repair_rate,
        invalid_rate=row.invalid_rate,
        truncation_rate=row.truncation_rate,
        rule_failure_rate=row.rule_failure_rate,
    )
    return dict(out)


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    srm = comparison.srm
    return {
        "run_id": comparison.run_id,
        "mode": comparison.mode,
        "control": comparison.control,
        "paired": comparison.paired,
        "rows": [_plain(asdict(r)) for r in comparison.rows],
        "srm": _plain(asdict(srm)) if srm is not None else None,
        "metrics": [metrics_json(m) for m in comparison.metrics],
    }


commands: list[click.Command] = [metrics_command, compare_command]
