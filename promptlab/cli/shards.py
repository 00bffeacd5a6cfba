"""`promptlab shards RUN_ID [SESSION]`: a replay's context shards as text."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from promptlab.cli.common import db_option, handle_errors, route, through, with_query

if TYPE_CHECKING:  # `promptlab --help` imports no more than it needs
    from promptlab.records.sessions import ShardRecord

#: Characters of a carried summary a shard's line shows.
SUMMARY_CHARS = 60


@click.command("shards")
@db_option
@click.argument("run_id")
@click.argument("session", required=False)
@click.pass_context
@handle_errors
def shards_command(ctx: click.Context, run_id: str, session: str | None) -> None:
    """List a replay's context shards: each session's history cut to fit the window.

    One line a shard: its session, variant and repeat, seq_no (final marked), the
    messages it holds, its tokens, why it starts where it does, and the summary it
    carries. Expired shards are not listed.
    """
    from promptlab.records.sessions import ShardRecord

    path = with_query(route("/v1/runs/{run_id}/shards", run_id=run_id), session=session)
    shards = through(
        ctx, list[ShardRecord], "GET", path, lambda wb: wb.runs.shards(run_id, session)
    )
    for line in shard_lines(run_id, shards, session):
        click.echo(line)


def shard_lines(run_id: str, shards: list[ShardRecord], session: str | None) -> list[str]:
    where = f" of session {session}" if session else ""
    if not shards:
        return [f"run {run_id}: no context shards{where} (every history fit, or they expired)"]
    summaries = [s for s in shards if s.summary is not None]
    cost = sum(s.summary_cost_usd or 0 for s in summaries)
    tokens = sum(s.summary_tokens or 0 for s in summaries)
    sessions = len({(s.session_id, s.variant, s.repeat) for s in shards})
    lines = [
        f"run {run_id}: {len(shards)} shards{where} in {sessions} session(s) (per variant "
        f"and repeat); {len(summaries)} summaries, {tokens:,} tokens, ${cost:.6f}"
    ]
    for s in shards:
        final = " final" if s.is_final else ""
        summary = s.summary.replace("\n", " ")[:SUMMARY_CHARS] if s.summary else "-"
        lines.append(
            f"  {s.session_id}  {s.variant}#{s.repeat}  shard {s.seq_no + 1}{final}  "
            f"messages {s.first_message + 1}-{s.last_message + 1}  {s.tokens} tokens  "
            f"cut: {s.cut}  expires {s.expires_at:%Y-%m-%d %H:%M}  summary: {summary}"
        )
    return lines


commands: list[click.Command] = [shards_command]
