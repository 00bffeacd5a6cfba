"""`promptlab drift RUN_ID`: semantic drift of a run's filled prompts from their versions'
typical prompt (promptlab/evaluation/drift.py), kept per rendering and printed per
variant with its 95% interval; the same through a server that owns the database
(`/v1/runs/{run_id}/drift`, server/drift_routes.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from promptlab.cli.common import db_option, handle_errors, route, through

if TYPE_CHECKING:
    from promptlab.evaluation.drift import VersionDrift

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
    type=click.FloatRange(0.0, 2.0, min_open=True),
    help="Cosine distance from the version's typical prompt past which a filled prompt is "
    f"drifted. Default: each version's own `drift_threshold:`, else {DEFAULT_THRESHOLD}.",
)
@click.option(
    "--reference",
    metavar="DATASET",
    help="Measure from the centroid of the version's renderings of this dataset's rows "
    "(its first 500), not from its `examples:` values.",
)
@click.option("--last", is_flag=True, help="Print the run's last check; embed nothing.")
@click.pass_context
@handle_errors
def drift(
    ctx: click.Context,
    run_id: str,
    model: str,
    threshold: float | None,
    reference: str | None,
    last: bool,
) -> None:
    """Embed each filled prompt of RUN_ID and compare it with its version rendered with
    the values it declares as typical (each variable's `examples:`, else `default:`);
    keep which drifted, and print each variant's drift rate."""
    found = _found(ctx, run_id, model, threshold, reference, last)
    if last and not any(v.renderings for v in found):
        click.echo(f"run {run_id}: no drift check yet (`promptlab drift {run_id}`)")
        return
    by = "as last checked" if last else f"by {model}"
    click.echo(f"run {run_id}: drift from each version's typical prompt, {by}")
    head = f"{'VARIANT':<16} {'PROMPTS':>8} {'DRIFTED':>8} {'RATE':>7} {'PAST':>5}  95% INTERVAL"
    click.echo(head)
    for v in found:
        interval = f"[{v.interval.low:.1%}, {v.interval.high:.1%}]"
        past = "-" if v.threshold is None else f"{v.threshold:g}"
        click.echo(
            f"{v.variant:<16} {v.renderings:>8} {v.drifted:>8} {v.rate:>7.1%} {past:>5}  {interval}"
        )


def _found(
    ctx: click.Context,
    run_id: str,
    model: str,
    threshold: float | None,
    reference: str | None,
    last: bool,
) -> list[VersionDrift]:
    """The run's last check (`last`), or a new one: here, or through the owning server."""
    from promptlab.evaluation.drift import VersionDrift

    path = route("/v1/runs/{run_id}/drift", run_id=run_id)
    if last:
        return through(ctx, list[VersionDrift], "GET", path, lambda wb: wb.drift.found(run_id))
    body = {"model": model, "threshold": threshold, "reference": reference}
    return through(
        ctx,
        list[VersionDrift],
        "POST",
        path,
        lambda wb: wb.drift.check(run_id, model, threshold, reference),
        body,
    )


commands = [drift]
