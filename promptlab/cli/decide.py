"""`promptlab decide REF_A REF_B`: the final look at two versions in production logs,
taken once (wb.analysis.decisions). Logs are read live by `compare --logs` (always
valid); once each arm has the planned units, a person takes the final look, which is
stored with its figures, who and when, and refused a second time. Through a server it
calls `/v1/analysis/decisions` (an editor's); without one it uses the database."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from promptlab.cli.common import db_option, handle_errors, through, with_query
from promptlab.cli.metrics_tables import comparison_table
from promptlab.views.compare import answer_sentences

if TYPE_CHECKING:
    from promptlab.facades.decisions import Decided
    from promptlab.workbench import Workbench


@click.command("decide")
@db_option
@click.argument("ref_a")
@click.argument("ref_b")
@click.option(
    "--planned-units",
    type=click.IntRange(min=1),
    metavar="N",
    help="Units per arm the comparison was planned to end at (default 1,000): the final "
    "look is refused before each arm has them.",
)
@click.option("--since", help="Only log lines since 7d, 24h or a date.")
@click.option("--show", is_flag=True, help="Print the decision taken, if any; take none.")
@click.pass_context
@handle_errors
def decide(
    ctx: click.Context,
    ref_a: str,
    ref_b: str,
    planned_units: int | None,
    since: str | None,
    show: bool,
) -> None:
    """Take the final look at version REF_B against REF_A in the production logs, once.

    A fixed-horizon test at the 4% of the 5% the live looks left; stored with its
    figures, your name and the time (a `comparison.decided` audit event). Refused
    before each arm has the planned units, and after a decision (`--show` prints it).
    """
    from promptlab.facades.decisions import Decided

    if show:

        def stored(wb: Workbench) -> Decided | None:
            return wb.analysis.decisions.get(ref_a, ref_b)

        path = with_query("/v1/analysis/decisions", a=ref_a, b=ref_b)
        found = through(ctx, Decided | None, "GET", path, stored)  # type: ignore[arg-type]
        if found is None:
            click.echo(f"{ref_b} against {ref_a}: not decided yet")
            return
        _print(found)
        return

    def take(wb: Workbench) -> Decided:
        return wb.analysis.decisions.decide(ref_a, ref_b, planned_units=planned_units, since=since)

    body = {"a": ref_a, "b": ref_b, "planned_units": planned_units, "since": since}
    _print(through(ctx, Decided, "POST", "/v1/analysis/decisions", take, body))


def _print(decided: Decided) -> None:
    click.echo(decided.line)
    click.echo(decided.comparison.method)
    for sentence in answer_sentences(decided.comparison):
        click.echo(sentence)
    for line in comparison_table(decided.comparison.rows):
        click.echo(line)


commands = [decide]
