"""The `promptlab` command: one group, commands contributed by focused modules."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from promptlab.audit.redact import install_log_redaction
from promptlab.cli import (
    audit,
    datasets,
    experiments,
    fakellm,
    feedback,
    metrics,
    prompts,
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
from promptlab.cli.common import EXIT_ERROR, ServedCommand, db_option


class ServedGroup(click.Group):
    """The `promptlab` group: a command whose database a server owns runs there.

    `open_workbench` raises ServedCommand when `promptlab serve` (or the app, with
    PROMPTLAB_SERVE) owns the database; the command line goes to the server's
    `POST /v1/cli`, which runs it against its own workbench, and its output and exit
    code come back as if it had run here.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["promptlab.argv"] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ServedCommand as served:
            from promptlab.server.client import ServerClient, ServerError

            # The server runs it on its own database: `--db` (which found it) stays here.
            argv = absolute_paths(without_db(ctx.meta["promptlab.argv"]))
            # A command reading stdin (`--units -`) gets it sent along; a terminal's is not.
            stdin = sys.stdin.read() if "-" in argv and not sys.stdin.isatty() else None
            # The server records what the command changes for this shell's author.
            author = os.environ.get("PROMPTLAB_AUTHOR") or os.environ.get("USER")
            body = {"argv": argv, "stdin": stdin, "author": author}
            try:
                client = ServerClient(served.info, timeout_s=None)
                answer = client.post("/v1/cli", body, idempotent=True)
            except ServerError as exc:
                click.echo(f"error: {exc}", err=True)
                ctx.exit(EXIT_ERROR)
            click.echo(answer["stdout"], nl=False)
            click.echo(answer["stderr"], nl=False, err=True)
            ctx.exit(answer["exit_code"])


#: Options whose value is a file to write: made absolute even when it does not exist yet.
OUTPUT_OPTIONS = ("-o", "--output", "--out")
OPTION_BEFORE = [[option] for option in OUTPUT_OPTIONS]


def absolute_paths(argv: list[str]) -> list[str]:
    """`argv` with each argument naming a file here made absolute: the server resolves
    relative paths against its own folder, not this shell's."""
    out: list[str] = []
    for arg in argv:
        option, eq, value = arg.partition("=")
        if eq and option.startswith("--") and _names_a_file(value, option in OUTPUT_OPTIONS):
            arg = f"{option}={Path(value).resolve()}"
        elif not arg.startswith("-") and _names_a_file(
            arg, bool(out) and out[-1] in OUTPUT_OPTIONS
        ):
            arg = str(Path(arg).resolve())
        out.append(arg)
    return out


def without_db(argv: list[str]) -> list[str]:
    """`argv` less its `--db FILE` and `--db=FILE` options."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--db":
            skip = True
        elif not arg.startswith("--db="):
            out.append(arg)
    return out


def _names_a_file(value: str, output: bool) -> bool:
    if not value or value == "-" or Path(value).is_absolute():
        return False
    return output or Path(value).is_file()


@click.group(cls=ServedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@db_option
@click.version_option(package_name="promptlab")
@click.pass_context
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
    feedback,
    export_cli,
    audit,
    review,
    schedules,
    serve,
    shards,
    tokens,
    worker,
):
    for command in module.commands:
        main.add_command(command)
