"""`promptlab drift RUN_ID`: semantic drift of a run's filled prompts from their versions'
typical prompt (promptlab/evaluation/drift.py), kept per rendering and printed per
variant with its 95% interval. On the database file: a server that owns it is named,
and the command refused in one line (it has no route yet)."""

from __future__ import annotations

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench

#: promptlab/evaluation/drift.py DEFAULT_THRESHOLD, written out so `--help` needs no
#: evaluation package (a test keeps them equal).
DEFAULT_THRESHOLD = 0.4


@click.command("drift")
@db_option
@click.argument("run_id")
@click.option(
    "--model",
    default="sim:embed",
    show_default=True,
    help="ENDPOINT:MODEL that embeds: an OpenAI-format endpoint of the providers file, "
    "or the simulated one (offline word hashing, not a language model).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0.0, 2.0),
    default=DEFAULT_THRESHOLD,
    show_default=True,
    help="Cosine distance from the version's typical prompt past which a filled prompt is drifted.",
)
@click.option("--last", is_flag=True, help="Print the run's last check; embed nothing.")
@click.pass_context
@handle_errors
def drift(ctx: click.Context, run_id: str, model: str, threshold: float, last: bool) -> None:
    """Embed each filled prompt of RUN_ID and compare it with its version rendered with
    the values it declares as typical (each variable's `examples:`, else `default:`);
    keep which drifted, and print each variant's drift rate."""
    with open_workbench(ctx) as wb:
        found = wb.drift.found(run_id) if last else wb.drift.check(run_id, model, threshold)
    if last and not any(v.renderings for v in found):
        click.echo(f"run {run_id}: no drift check yet (`promptlab drift {run_id}`)")
        return
    by = "as last checked" if last else f"by {model}"
    click.echo(f"run {run_id}: drift from each version's typical prompt, {by}")
    click.echo(f"{'VARIANT':<16} {'PROMPTS':>8} {'DRIFTED':>8} {'RATE':>7}  95% INTERVAL")
    for v in found:
        interval = f"[{v.interval.low:.1%}, {v.interval.high:.1%}]"
        click.echo(f"{v.variant:<16} {v.renderings:>8} {v.drifted:>8} {v.rate:>7.1%}  {interval}")


commands = [drift]
