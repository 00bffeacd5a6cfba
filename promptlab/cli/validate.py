"""`promptlab validate`: check a file of outputs produced anywhere against an output schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from promptlab.cli.common import EXIT_ERROR, EXIT_OK, db_option, handle_errors, open_workbench


@click.command("validate")
@db_option
@click.argument("outputs", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--schema",
    "schema_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The output JSON Schema (a JSON or YAML file); the database is not opened.",
)
@click.option(
    "--prompt",
    "prompt_ref",
    metavar="REF",
    help="Use this prompt version's output schema instead (name, name@1.2.0, name@label).",
)
@click.option("--json", "as_json", is_flag=True,
              help="One JSON line per output, then a summary line.")  # fmt: skip
@click.pass_context
@handle_errors
def validate_command(
    ctx: click.Context, outputs: Path, schema_file: Path | None, prompt_ref: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Check every output in OUTPUTS (JSON Lines) against an output schema.

    Each line is a JSON string (the output), an object with `output` or `text` and
    optional `finish_reason` and `id`, or an OpenAI Batch output line. Prints per line
    valid, repaired, truncated or invalid with every error path, then a summary. Exits 1
    when any output is invalid or truncated.
    """
    from promptlab.outputfile import Tally, load_schema, read_outputs
    from promptlab.validation import checker_for

    if (schema_file is None) == (prompt_ref is None):
        raise click.UsageError("give either --schema SCHEMA.json or --prompt REF")
    schema = _schema(ctx, schema_file, prompt_ref, load_schema)
    checker = checker_for(schema)
    tally = Tally()
    for line in read_outputs(outputs):
        check = checker.check(line.text, line.finish_reason)
        tally.add(check)
        if as_json:
            record: dict[str, Any] = {
                "line": line.number,
                "id": line.id,
                "status": check.status.value,
                "errors": list(check.errors),
            }
            click.echo(json.dumps(record, ensure_ascii=False))
            continue
        click.echo(f"{line.label}: {check.status}")
        for error in check.errors:
            click.echo(f"  {error}")
    if as_json:
        click.echo(json.dumps({"summary": tally.as_dict()}))
    else:
        click.echo(tally.line())
    ctx.exit(EXIT_ERROR if tally.unusable else EXIT_OK)


def _schema(
    ctx: click.Context, schema_file: Path | None, prompt_ref: str | None, load: Any
) -> dict[str, Any]:
    if schema_file is not None:
        return dict(load(schema_file))
    assert prompt_ref is not None
    with open_workbench(ctx) as wb:
        version = wb.prompts.resolve(prompt_ref)
    if version.template.output_schema is None:
        raise click.UsageError(f"{version.ref} has no output schema; give --schema instead")
    return dict(version.template.output_schema)


commands: list[click.Command] = [validate_command]
