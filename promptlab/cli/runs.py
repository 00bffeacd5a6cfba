"""`promptlab run / batch / resume / status`: batch runs through the shared engine.

Its `commands` also carry `promptlab pause` and `promptlab cancel`, which live in
cli/run_control.py.

Exit codes of `run` and `resume` (documented in the README):
0 the run completed (every item has its final row; failed items are counted in the
summary) or waits for the runs it comes after (`after:`), 1 the run failed (stopped on
quota or auth, or an internal error), 2 bad spec or usage, 3 the run was cancelled
(Ctrl-C) or paused, 4 completed with failed items and `--strict` given.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from promptlab.cli.cache import cache_option, data_with_cache, refuse_remote_cache, spec_with_cache
from promptlab.cli.common import (
    calls,
    db_option,
    executor_of,
    handle_errors,
    open_workbench,
    provider_batch_option,
    route,
    served,
    through,
)
from promptlab.cli.items import item_lines, items_lines, read_item, read_items
from promptlab.cli.remote import download_batch_output, drive_remote
from promptlab.cli.run_control import cancel_command, pause_command
from promptlab.cli.run_text import print_view
from promptlab.cli.run_watch import drive_run
from promptlab.errors import ConfigError, RegistryError, SpecError, TemplateError
from promptlab.server.client import ServerClient

if TYPE_CHECKING:
    from promptlab.facades.runs import RunView
    from promptlab.workbench import Workbench

# The facade (`promptlab.workbench`) is imported inside the functions that use it: it
# brings DuckDB, pyarrow, jinja2 and the engine, which `--help` never needs.

#: What `promptlab run` reports as a bad spec (exit 2): the spec names something wrong.
SPEC_PROBLEMS = (ConfigError, RegistryError, TemplateError)


@click.command("run")
@db_option
@click.argument("spec_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--strict", is_flag=True, help="Exit 4 when the run completes with failed items.")
@click.option("--quiet", is_flag=True, help="No progress bar; only the run id and summary.")
@click.option(
    "--distributed",
    is_flag=True,
    help="Send the requests through Celery workers (`promptlab worker`), as "
    "`executor: celery` in the spec would.",
)
@provider_batch_option
@cache_option
@click.pass_context
@handle_errors(usage=SPEC_PROBLEMS)
def run_command(
    ctx: click.Context,
    spec_file: Path,
    strict: bool,
    quiet: bool,
    distributed: bool,
    provider_batch: bool,
) -> None:
    """Run a YAML run spec; print the run id, a progress bar and a summary."""
    from promptlab.errors import SpecError
    from promptlab.yamlio import read_yaml

    data = data_with_cache(ctx, read_yaml(spec_file, error=SpecError))
    executor = executor_of(distributed, provider_batch)
    if executor is not None and isinstance(data, dict):
        data = {**data, "executor": executor}
    server = served(ctx)
    if server is not None:
        body = {
            "spec": data,
            "base_dir": str(spec_file.resolve().parent),
            "default_name": spec_file.stem,
        }
        drive_remote(server, lambda c: c.post("/v1/runs", body, idempotent=True), strict, quiet)

    def start(wb: Workbench) -> str:
        spec = wb.runs.spec_from_data(data, base_dir=spec_file.parent, default_name=spec_file.stem)
        return wb.runs.start(spec)

    drive_run(ctx, start, strict, quiet)


@click.command("resume")
@db_option
@click.argument("run_id")
@click.option("--strict", is_flag=True, help="Exit 4 when the run completes with failed items.")
@click.option("--quiet", is_flag=True, help="No progress bar; only the summary.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="For a `promptlab batch` run: write its results in the OpenAI Batch output format.",
)
@click.pass_context
@handle_errors(usage=(ConfigError,))
def resume_command(
    ctx: click.Context, run_id: str, strict: bool, quiet: bool, output: Path | None
) -> None:
    """Resume a run that was interrupted, cancelled or stopped; finished items are kept."""
    server = served(ctx)
    if server is not None:
        resume = f"/v1/runs/{run_id}/resume"
        drive_remote(server, lambda c: c.post(resume), strict, quiet, output)
    drive_run(ctx, lambda wb: wb.runs.resume(run_id), strict, quiet, output)


@click.command("batch")
@db_option
@click.argument("requests_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--endpoint",
    help="Endpoint name (providers file or built-in); with --base-url and no name, `batch`.",
)
@click.option("--model", help="Model at the endpoint (default: the first line's body model).")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the results here in the OpenAI Batch output format.",
)
@click.option(
    "--id-field",
    default="custom_id",
    show_default=True,
    help="Each line's id: a field, or a dotted path into the line (metadata.id).",
)
@click.option("--base-url", help="Send to this server (no providers file needed).")
@click.option(
    "--kind",
    type=click.Choice(["openai", "anthropic"]),
    help="The API the --base-url server speaks (default: openai, or the endpoint's own).",
)
@click.option(
    "--api-key-env",
    metavar="NAME",
    help="The environment variable holding the key (its name is stored, never the key).",
)
@click.option("--rpm", type=click.IntRange(min=1), help="Requests per minute for the endpoint.")
@click.option("--tpm", type=click.IntRange(min=1), help="Tokens per minute for the endpoint.")
@click.option("--concurrency", type=click.IntRange(min=1), help="Requests in flight at most.")
@click.option(
    "--distributed",
    is_flag=True,
    help="Send the requests through Celery workers (`promptlab worker`).",
)
@provider_batch_option
@cache_option
@click.option("--strict", is_flag=True, help="Exit 4 when the run completes with failed items.")
@click.option("--quiet", is_flag=True, help="No progress bar; only the run id and summary.")
@click.pass_context
@handle_errors(usage=SPEC_PROBLEMS)
def batch_command(
    ctx: click.Context,
    requests_file: Path,
    endpoint: str | None,
    model: str | None,
    output: Path | None,
    id_field: str,
    base_url: str | None,
    kind: str | None,
    api_key_env: str | None,
    rpm: int | None,
    tpm: int | None,
    concurrency: int | None,
    distributed: bool,
    provider_batch: bool,
    strict: bool,
    quiet: bool,
) -> None:
    """Run a file of requests as written (OpenAI Batch input lines or chat bodies).

    Every line is checked first; each is sent with its own messages and params, its id
    as the request id. The run is durable like any other (`status`, `resume`): the
    endpoint settings given here are stored with it (never the key), so `resume` needs
    only the key in the environment. `promptlab batch-output RUN_ID -o FILE` writes the
    output file again for any finished run.
    """
    settings = {
        "base_url": base_url,
        "kind": kind,
        "api_key_env": api_key_env,
        "rpm": rpm,
        "tpm": tpm,
        "concurrency": concurrency,
        "executor": executor_of(distributed, provider_batch),
    }

    server = served(ctx)
    if server is not None:
        refuse_remote_cache(ctx, "batch")
        body = {
            "requests": str(requests_file.resolve()),
            "endpoint": endpoint,
            "model": model,
            "id_field": id_field,
            "settings": settings,
        }
        drive_remote(
            server, lambda c: c.post("/v1/batches", body, idempotent=True), strict, quiet, output
        )

    def start(wb: Workbench) -> str:
        spec = wb.runs.batch_spec(requests_file, endpoint, model, id_field, settings)
        return wb.runs.start(spec_with_cache(ctx, wb, spec))

    drive_run(ctx, start, strict, quiet, output)


@click.command("batch-output")
@db_option
@click.argument("run_id")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Write the run's results here in the OpenAI Batch output format.",
)
@click.pass_context
@handle_errors(usage=(SpecError,))
def batch_output_command(ctx: click.Context, run_id: str, output: Path) -> None:
    """Write a `promptlab batch` run's results (again) in the OpenAI Batch output format.

    One line per request in file order; a request that has no answer (failed,
    cancelled, or not yet sent) gets an `error` line saying so.
    """
    server = served(ctx)
    if server is not None:
        count = download_batch_output(ServerClient(server), run_id, output)
    else:
        with open_workbench(ctx) as wb:
            count = wb.runs.write_batch_output(run_id, output)
    click.echo(f"wrote {count} results of run {run_id} to {output} (OpenAI Batch output format)")


ITEM_STATUSES = ("pending", "in_flight", "succeeded", "failed", "cancelled")
#: promptlab.checks.validation.CheckStatus, written out like ITEM_STATUSES.
CHECK_STATUSES = ("valid", "repaired", "invalid", "truncated", "no_schema")


@click.command("status")
@db_option
@click.argument("run_id", required=False)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Runs listed, or items per page with --items.",
)
@click.option("--items", "list_items", is_flag=True, help="List the run's items (plan order).")
@click.option(
    "--status",
    "item_status",
    type=click.Choice(ITEM_STATUSES),
    help="With --items: only items in this state.",
)
@click.option("--variant", help="With --items: only this variant's items.")
@click.option("--error-kind", help="With --items: only items that failed with this kind.")
@click.option("--search", help="With --items: a key prefix, or text in the row, output or error.")
@click.option(
    "--check",
    type=click.Choice(CHECK_STATUSES),
    help="With --items: only items whose output check has this status.",
)
@click.option("--offset", type=click.IntRange(min=0), default=0, help="With --items: skip N.")
@click.option(
    "--item",
    "item_key",
    metavar="KEY",
    help="Show one item (its key or 8+ hex digits of it): inputs, messages, "
    "params, output, error and every attempt.",
)
@click.option(
    "--detect",
    is_flag=True,
    help="Run the anomaly detectors over the stored results again first "
    "(replaces the run's alerts).",
)
@click.pass_context
@handle_errors
def status_command(
    ctx: click.Context,
    run_id: str | None,
    limit: int,
    list_items: bool,
    item_status: str | None,
    variant: str | None,
    error_kind: str | None,
    search: str | None,
    check: str | None,
    offset: int,
    item_key: str | None,
    detect: bool,
) -> None:
    """Show one run (counts, variants side by side, failures) or list recent runs.

    With --items, list the run's items; with --item KEY, show how one item came to be.
    """
    if (list_items or item_key) and run_id is None:
        raise click.UsageError("--items and --item need a RUN_ID")
    if detect and run_id is None:
        raise click.UsageError("--detect needs a RUN_ID")
    if item_key is not None:
        for line in item_lines(read_item(ctx, run_id or "", item_key)):
            click.echo(line)
        return
    if list_items:
        filters = {
            "status": item_status,
            "variant": variant,
            "error kind": error_kind,
            "check": check,
            "search": search,
        }
        page = read_items(ctx, run_id or "", filters, offset, limit)
        for line in items_lines(run_id or "", page, filters):
            click.echo(line)
        return
    if run_id is None:
        from promptlab.records import RunWithCounts

        path = f"/v1/run-summaries?limit={limit}"
        listed = through(ctx, list[RunWithCounts], "GET", path, lambda wb: wb.runs.list(limit))
        if not listed:
            click.echo("no runs yet")
        for entry in listed:
            r = entry.run
            click.echo(
                f"{r.run_id}  {r.state:<9}  {entry.items.finished}/{r.total_items}  "
                f"{r.submitted_at:%Y-%m-%d %H:%M}  {r.name}"
            )
        return
    print_view(read_view(ctx, run_id, detect))


def read_view(ctx: click.Context, run_id: str, detect: bool) -> RunView:
    """The run's view (its anomaly detectors run again first with `detect`), from the
    database or the server's typed routes."""
    from promptlab.facades.run_view import RunView
    from promptlab.records import AlertRecord

    with calls(ctx) as call:
        if detect:
            path = route("/v1/runs/{run_id}/anomalies", run_id=run_id)
            call(list[AlertRecord], "POST", path, lambda wb: wb.analysis.detect_anomalies(run_id))
        path = route("/v1/runs/{run_id}/view", run_id=run_id)
        return call(RunView, "GET", path, lambda wb: wb.runs.view(run_id))


commands: list[click.Command] = [
    run_command,
    batch_command,
    batch_output_command,
    resume_command,
    pause_command,
    status_command,
    cancel_command,
]
