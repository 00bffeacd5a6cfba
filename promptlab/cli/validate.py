"""`promptlab validate`: check a file of outputs produced anywhere against an output schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from promptlab.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    db_option,
    handle_errors,
    open_workbench,
    served,
)

if TYPE_CHECKING:
    from promptlab.checks.rules import RuleOutcome, RuleSet, RuleStatus


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
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Rules (YAML) to check valid and repaired outputs against; with --prompt "
    "the version's own rules are used too.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON line per output, then a summary line."
)
@click.pass_context
@handle_errors
def validate_command(
    ctx: click.Context,
    outputs: Path,
    schema_file: Path | None,
    prompt_ref: str | None,
    rules_file: Path | None,
    as_json: bool,
) -> None:
    """Check every output in OUTPUTS (JSON Lines) against an output schema.

    Each line is a JSON string (the output), an object with `output` or `text` and
    optional `finish_reason` and `id`, or an OpenAI Batch output line. Prints per line
    valid, repaired, truncated or invalid with every error path, then a summary. Exits 1
    when any output is invalid or truncated, or fails a rule of severity error.
    """
    from promptlab.checks.outputfile import Tally, load_rules, load_schema, read_outputs
    from promptlab.checks.rules import RuleSet
    from promptlab.checks.validation import CheckStatus, checker_for

    if (schema_file is None) == (prompt_ref is None):
        raise click.UsageError("give either --schema SCHEMA.json or --prompt REF")
    schema, rules = _schema(ctx, schema_file, prompt_ref, load_schema)
    if rules_file is not None:
        rules = RuleSet((*rules.rules, *load_rules(rules_file).rules))
    checker = checker_for(schema)
    tally = Tally(with_rules=bool(rules))
    for line in read_outputs(outputs):
        check = checker.check(line.text, line.finish_reason)
        verdict: RuleStatus | None = None
        failed: tuple[RuleOutcome, ...] = ()
        if rules and check.status in (CheckStatus.VALID, CheckStatus.REPAIRED):
            verdict, failed = rules.check(check.parsed)
        tally.add(check, verdict)
        if as_json:
            record: dict[str, Any] = {
                "line": line.number,
                "id": line.id,
                "status": check.status.value,
                "errors": list(check.errors),
            }
            if rules:
                record |= {"rules": verdict, "rule_errors": [str(f) for f in failed]}
            click.echo(json.dumps(record, ensure_ascii=False))
            continue
        rule_note = f", rules {verdict}" if verdict is not None and failed else ""
        click.echo(f"{line.label}: {check.status}{rule_note}")
        for error in check.errors:
            click.echo(f"  {error}")
        for outcome in failed:
            click.echo(f"  rule {outcome}")
    if as_json:
        click.echo(json.dumps({"summary": tally.as_dict()}))
    else:
        click.echo(tally.line())
    ctx.exit(EXIT_ERROR if tally.unusable else EXIT_OK)


def _schema(
    ctx: click.Context, schema_file: Path | None, prompt_ref: str | None, load: Any
) -> tuple[dict[str, Any], RuleSet]:
    """The schema to check against and the rules that come with it (a version's own)."""
    from promptlab.checks.rules import RuleSet

    if schema_file is not None:
        return dict(load(schema_file)), RuleSet(())
    assert prompt_ref is not None
    server = served(ctx)
    if server is not None:  # the version's schema and rules from the server; checked here
        from urllib.parse import urlencode

        from promptlab.checks.rules import parse_rules
        from promptlab.server.client import ServerClient

        query = urlencode({"prompt": prompt_ref})
        answer = ServerClient(server).call("GET", f"/v1/output-checks?{query}")
        ref, schema, rules = answer["ref"], answer["output_schema"], answer["rules"]
        rule_set = RuleSet(parse_rules(list(rules)))
    else:
        with open_workbench(ctx) as wb:
            version = wb.prompts.resolve(prompt_ref)
        ref, schema, rules = version.ref, version.template.output_schema, version.template.rules
        rule_set = version.template.rule_set
    if schema is None and not rules:
        raise click.UsageError(f"{ref} has no output schema or rules; give --schema instead")
    return dict(schema or {}), rule_set


commands: list[click.Command] = [validate_command]
