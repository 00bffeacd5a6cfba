"""The `promptlab` command: one group, commands contributed by focused modules."""

from __future__ import annotations

import click

from promptlab.audit.redact import install_log_redaction
from promptlab.cli import (
    audit,
    cache,
    datasets,
    experiments,
    fakellm,
    feedback,
    metrics,
    prompts,
    repeats,
    review,
    runs,
    schedules,
    serve,
    shards,
    tokens,
    validate,
    worker,
)
from promptlab.cli import export as export_cli
from promptlab.cli.common import db_option, handle_errors


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@db_option
@click.version_option(package_name="promptlab")
@click.pass_context
@handle_errors  # a PROMPTLAB_LOG_FORMAT it cannot write is refused in one line
def main(ctx: click.Context) -> None:
    """promptlab: versioned prompts, A/B batches and their metrics, stored in DuckDB."""
    ctx.ensure_object(dict)
    install_log_redaction()


for module in (
    prompts,
    fakellm,
    runs,
    datasets,
    experiments,
    validate,
    metrics,
    repeats,
    feedback,
    export_cli,
    audit,
    review,
    schedules,
    serve,
    shards,
    tokens,
    worker,
    cache,
):
    for command in module.commands:
        main.add_command(command)
