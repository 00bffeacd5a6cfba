"""`promptlab audit verify | show | export`: the tamper-evident audit trail.

The facade is imported inside the commands (it brings DuckDB): `--help` stays light.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from promptlab.cli.common import (
    EXIT_ERROR,
    db_option,
    handle_errors,
    open_workbench,
    route,
    served,
    through,
)

if TYPE_CHECKING:
    from promptlab.audit.chain import AuditEvent, AuditTrace


@click.group("audit")
def audit_group() -> None:
    """Verify, show and export the audit trail (item traces and change events)."""


@audit_group.command("verify")
@db_option
@click.pass_context
@handle_errors
def verify_command(ctx: click.Context) -> None:
    """Check every hash chain against its anchor, and every results and attempts row
    against its event; exit 1 naming each broken chain's first bad event and each row
    that differs."""
    from promptlab.audit.report import VerifyReport
    from promptlab.views.audit import chain_summary

    report = through(ctx, VerifyReport, "GET", "/v1/audit/verify", lambda wb: wb.audit.verify())
    summary = chain_summary(report)
    for problem in summary.problems:
        click.echo(f"FAIL {problem}", err=True)
    runs = sum(1 for c in report.chains if c.chain != "changes")
    events = sum(c.events for c in report.chains)
    unanchored = [c.chain for c in report.chains if not c.anchored]
    if unanchored:
        click.echo(f"note: {len(unanchored)} run chain(s) not anchored by a run.submitted event")
    for note in summary.notes:
        click.echo(f"note: {note}")
    if not report.ok:
        ctx.exit(EXIT_ERROR)
    head = next((c for c in report.chains if c.chain == "changes"), None)
    pinned = f"; changes head seq {head.head_seq} {head.head_hash}" if head else ""
    results = sum(r.results for r in report.runs)
    attempts = sum(r.attempts for r in report.runs)
    click.echo(
        f"ok: {events} events in {runs} run chain(s) and the changes chain; {results} results "
        f"and {attempts} attempts rows match their events{pinned}"
    )


@audit_group.command("show")
@db_option
@click.argument("trace_id")
@click.option("--json", "as_json", is_flag=True, help="Print the events as JSON.")
@click.pass_context
@handle_errors
def show_command(ctx: click.Context, trace_id: str, as_json: bool) -> None:
    """The timeline of one item: TRACE_ID is its trace id (item key) or 8+ hex digits of it."""
    from promptlab.audit.chain import AuditTrace, event_record

    path = route("/v1/audit/traces/{trace}", trace=trace_id)
    trace = through(ctx, AuditTrace, "GET", path, lambda wb: wb.audit.trace(trace_id))
    if as_json:
        shown = {
            "trace_id": trace.trace_id,
            "run_id": trace.run_id,
            "bucket": trace.bucket,
            "events": [event_record(e) for e in trace.events],
            "attempts": trace.attempts,
            "stages": dict(trace.stages),
            "result_verified": trace.result_verified,
        }
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    click.echo(f"trace {trace.trace_id} (run {trace.run_id})")
    if trace.bucket is not None:
        click.echo(f"  assignment bucket {trace.bucket}")
    for line in trace_lines(trace):
        click.echo(line)


def trace_lines(trace: AuditTrace) -> list[str]:
    """An item's trace as `audit show` prints it: each attempt, then the result with
    every stage, the prompt and the output."""
    lines = [f"{a.get('ended_at', '')}  {attempt_line(a)}" for a in trace.attempts]
    for event in trace.events:
        if event.kind not in ("attempt", "result"):
            at = event.at.isoformat(timespec="milliseconds")
            lines.append(f"{at}  {event.kind} by {event.actor}: {json.dumps(event.payload)}")
    if trace.result is not None:
        lines += result_lines(trace.result, trace.stages)
        if trace.result_verified is not None:
            verdict = "matches" if trace.result_verified else "DOES NOT match"
            lines.append(f"    the stored result {verdict} the hash its event recorded")
    return lines


def result_lines(event: AuditEvent, p: Mapping[str, Any]) -> list[str]:
    """A result event's lines: its state, every stage, the prompt and the output."""
    at = event.at.isoformat(timespec="milliseconds")
    lines = []
    error = f" ({p['error_kind']}: {p.get('error_message')})" if p.get("error_kind") else ""
    lines.append(f"{at}  result: {p.get('status')}{error} after {p.get('attempts')} attempt(s)")
    if p.get("cache_hit"):
        lines.append("    answered from the response cache: not sent, cost $0")
    for stage in ("render", "preflight", "routing", "response", "validation", "masking"):
        if p.get(stage) is not None:
            lines.append(f"    {stage}: {json.dumps(p[stage], default=str)}")
    if p.get("prompt") is not None:
        lines.append(f"    prompt: {json.dumps(p['prompt'], ensure_ascii=False)}")
    if p.get("output") is not None:
        # As JSON text: model output may carry terminal escape sequences.
        lines.append(f"    output: {json.dumps(p['output'], ensure_ascii=False)}")
    return lines


def attempt_line(p: dict[str, Any]) -> str:
    wait = (
        f", waited {p.get('wait_ms', 0):.0f} ms ({p['wait_reason']})"
        if p.get("wait_reason")
        else ""
    )
    error = f" {p['error_kind']}: {p.get('error_message')}" if p.get("error_kind") else ""
    latency = p.get("latency_ms") or 0
    return f"attempt {p.get('attempt')}: {p.get('status')}{error}, {latency:.0f} ms{wait}"


@audit_group.command("export")
@db_option
@click.option("--run", "run_id", required=True, help="The run whose events are exported.")
@click.option(
    "-o", "--output", "output", required=True, type=click.Path(dir_okay=False, path_type=Path)
)
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.pass_context
@handle_errors
def export_command(ctx: click.Context, run_id: str, output: Path, force: bool) -> None:
    """Write a run's events (traces and its change events) as JSON Lines to OUTPUT."""
    server = served(ctx)
    if server is not None:  # the server streams the lines; the file is written here
        from urllib.parse import urlencode

        from promptlab.atomicfile import write_chunks
        from promptlab.server.client import ServerClient

        query = urlencode({"run_id": run_id, "file_name": output.name})
        chunks = ServerClient(server, timeout_s=None).chunks(f"/v1/audit/export?{query}")
        count = write_chunks(output, chunks, force=force)
    else:
        with open_workbench(ctx) as wb:
            count = wb.audit.export(output, run_id=run_id, force=force)
    click.echo(f"wrote {count} events to {output}")


commands = [audit_group]
