"""`promptlab init` and `promptlab prompt ...`: the prompt registry from the shell.

With a server owning the database, each command calls its typed routes
(promptlab/server/prompt_routes.py) and prints the records they answer with as it
prints its own: files are read and written here, the server gets and gives text.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from promptlab.cli.common import db_option, handle_errors, open_workbench, route, served, through
from promptlab.data.jsonl import NotJsonError, strict_loads
from promptlab.data.lines import LineLimits, open_lines

# The errors module is light; the facade and the prompt modules are imported inside
# the commands that use them, so `promptlab --help` loads no templates, store or engine.
from promptlab.errors import PromptlabError, VariableError, VariableProblem

if TYPE_CHECKING:
    from promptlab.records.prompts import LabelledVersion, SaveResult
    from promptlab.server.client import ServerClient
    from promptlab.server.discovery import ServerInfo

#: Seconds between looks at the demo run through a server.
POLL_S = 0.2


@click.command()
@db_option
@click.option(
    "--demo",
    is_flag=True,
    help="Also load data/demo (prompts, the tickets dataset, the triage-split experiment) and, "
    "into a database with no runs, run the demo experiment on the simulated model.",
)
@click.pass_context
@handle_errors
def init(ctx: click.Context, demo: bool) -> None:
    """Create the database (and apply migrations); with --demo, load and run the demo."""
    server = served(ctx)
    if server is not None:
        _init_through(server, demo)
        return
    with open_workbench(ctx) as wb:
        click.echo(f"database ready: {wb.store.path}")
        if demo:
            _demo_prompts(wb.demo.load())
            run_id = wb.demo.start_run()
            if run_id is not None:
                done = wb.runs.wait(run_id)
                # Now, not in the background: this process is about to exit.
                wb.demo.record_feedback(run_id)
                click.echo(f"demo experiment run {run_id}: {done.status}, {done.total} items")


def _init_through(server: ServerInfo, demo: bool) -> None:
    """`init` on a server's database: it is there; the server loads the demo it ships
    and starts the demo run (recording its clicks when it ends), followed from here."""
    from promptlab.facades.runs import RunProgress
    from promptlab.records.prompts import DemoLoaded
    from promptlab.server.client import ServerClient
    from promptlab.server.typed import from_wire

    client = ServerClient(server)
    click.echo(f"database ready: {client.call('GET', '/v1/health')['database']}")
    if not demo:
        return
    loaded = from_wire(DemoLoaded, client.call("POST", "/v1/demo"))
    _demo_prompts(loaded.results)
    if loaded.run_id is not None:
        done = from_wire(RunProgress, _followed(client, loaded.run_id))
        click.echo(f"demo experiment run {loaded.run_id}: {done.status}, {done.total} items")


def _followed(client: ServerClient, run_id: str) -> object:
    """The run's progress once it is no longer active (as `wb.runs.wait` returns it)."""
    path = route("/v1/runs/{run_id}", run_id=run_id)
    while (progress := client.call("GET", path))["active"]:
        time.sleep(POLL_S)
    return progress


def _demo_prompts(results: list[SaveResult]) -> None:
    created = sum(r.created for r in results)
    click.echo(f"demo prompts: {created} new versions ({len(results) - created} already there)")


@click.group()
def prompt() -> None:
    """Manage prompt templates: add, list, show, diff, label, render, export."""


@prompt.command("add")
@db_option
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--author", help="Author recorded on new versions (default: PROMPTLAB_AUTHOR).")
@click.pass_context
@handle_errors
def add(ctx: click.Context, file: Path, author: str | None) -> None:
    """Import a YAML prompt file; each changed version becomes a new version. A file in
    a git work tree records the commit checked out, and whether the file differed from it."""
    from promptlab.prompts.files import load_prompt_file  # heavy (templates): see the top
    from promptlab.prompts.gitsource import git_source
    from promptlab.records.prompts import SaveResult

    prompt_file = load_prompt_file(file)  # fully checked before anything is saved
    git = git_source(file)
    body = None
    if served(ctx):  # the text goes (the server checks it again): read once more here
        sent_git = dataclasses.asdict(git) if git else None
        body = {"text": _text_of(file), "source": str(file), "author": author, "git": sent_git}
    results = through(
        ctx,
        list[SaveResult],
        "POST",
        "/v1/prompts",
        lambda wb: wb.prompts.import_file(prompt_file, author, git),
        body,
    )
    for result in results:
        click.echo(result.describe())
    if git is not None and any(r.created for r in results):
        changed = " (the file had uncommitted changes)" if git.dirty else ""
        click.echo(f"from git commit {git.commit[:12]}{changed}")


@prompt.command("list")
@db_option
@click.pass_context
@handle_errors
def list_prompts(ctx: click.Context) -> None:
    """List prompts with their latest version and labels."""
    from promptlab.records.prompts import PromptSummary

    summaries = through(
        ctx, list[PromptSummary], "GET", "/v1/prompts", lambda wb: wb.prompts.list()
    )
    if not summaries:
        click.echo("no prompts yet: try `promptlab init --demo` or `promptlab prompt add FILE`")
        return
    rows = [
        (
            s.name,
            s.latest.semver,
            str(s.version_count),
            ", ".join(f"{k}={v}" for k, v in s.labels.items()) or "-",
            s.description,
        )
        for s in summaries
    ]
    _print_table(("NAME", "LATEST", "VERSIONS", "LABELS", "DESCRIPTION"), rows)


@prompt.command("show")
@db_option
@click.argument("ref")
@click.pass_context
@handle_errors
def show(ctx: click.Context, ref: str) -> None:
    """Show one version: REF is NAME, NAME@1.2.0, NAME@LABEL, NAME@sha256:PREFIX or
    NAME@git:COMMIT (the version added from that commit)."""
    shown = _labelled(ctx, ref)
    version, labels = shown.version, shown.labels
    click.echo(f"{version.ref}  {version.id}")
    click.echo(f"author: {version.author}  created: {version.created_at:%Y-%m-%d %H:%M:%S %Z}")
    click.echo(f"message: {version.message or '-'}")
    click.echo(f"labels: {', '.join(labels) or '-'}")
    if version.git is not None:
        changed = " (with uncommitted changes)" if version.git.dirty else ""
        click.echo(f"git: {version.git.commit} {version.git.path}{changed}")
    click.echo(f"params: {json.dumps(dict(version.template.params))}")
    click.echo(f"variables: {json.dumps(version.template.variables['properties'])}")
    if version.template.output_schema:
        click.echo(f"output_schema: {json.dumps(version.template.output_schema)}")
    for index, message in enumerate(version.template.messages):
        click.echo(f"\n[{index}] {message.role}\n{message.content.rstrip()}")


@prompt.command("history")
@db_option
@click.argument("name")
@click.pass_context
@handle_errors
def history(ctx: click.Context, name: str) -> None:
    """List every version of NAME, newest first, and the moves of its labels."""
    from promptlab.records.prompts import PromptHistory

    path = route("/v1/prompts/{name}/history", name=name)
    found = through(ctx, PromptHistory, "GET", path, lambda wb: wb.prompts.history(name))
    versions, moves = found.versions, found.moves
    _print_table(
        ("VERSION", "ID", "GIT", "CREATED", "AUTHOR", "MESSAGE"),
        [
            (
                v.semver,
                v.short_id,
                v.git.short if v.git else "-",
                f"{v.created_at:%Y-%m-%d %H:%M}",
                v.author,
                v.message,
            )
            for v in versions
        ],
    )
    if moves:
        click.echo("")
        _print_table(
            ("LABEL", "VERSION", "MOVED", "BY"),
            [(m.label, m.semver, f"{m.moved_at:%Y-%m-%d %H:%M:%S}", m.actor) for m in moves],
        )


@prompt.command("diff")
@db_option
@click.argument("name")
@click.argument("ref_a")
@click.argument("ref_b")
@click.pass_context
@handle_errors
def diff(ctx: click.Context, name: str, ref_a: str, ref_b: str) -> None:
    """Show what changed in NAME from REF_A to REF_B (versions, labels or hashes)."""
    from promptlab.records.prompts import VersionDiff

    query = urllib.parse.urlencode({"a": ref_a, "b": ref_b})
    path = f"{route('/v1/prompts/{name}/diff', name=name)}?{query}"
    found = through(ctx, VersionDiff, "GET", path, lambda wb: wb.prompts.diff(name, ref_a, ref_b))
    text = found.to_text()
    for line in text.splitlines():
        color = "green" if line.startswith("+") else "red" if line.startswith("-") else None
        click.secho(line, fg=color)


@prompt.command("label")
@db_option
@click.argument("name")
@click.argument("ref")
@click.argument("label")
@click.option(
    "--expect-version",
    "expected",
    metavar="VERSION",
    help="The version you saw LABEL point at (a semver or hash; `none`: no such label). "
    "The move is refused, naming who moved the label and when, if it points elsewhere now.",
)
@click.pass_context
@handle_errors
def label(ctx: click.Context, name: str, ref: str, label: str, expected: str | None) -> None:
    """Point LABEL (production, staging, any name) of NAME at version REF."""
    from promptlab.records.prompts import PromptVersion

    path = route("/v1/prompts/{name}/labels/{label}", name=name, label=label)
    version = through(
        ctx,
        PromptVersion,
        "PUT",
        path,
        lambda wb: wb.prompts.set_label(name, ref, label, expected=expected),
        {"ref": ref, "expected": expected},
    )
    click.echo(f"{name}@{label} -> {version.semver} ({version.short_id})")


@prompt.command("render")
@db_option
@click.argument("ref")
@click.option("--var", "variables", multiple=True, metavar="KEY=VALUE", help="A variable value.")
@click.option(
    "--vars-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A JSON file with an object of variable values.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the messages as JSON.")
@click.pass_context
@handle_errors
def render(
    ctx: click.Context, ref: str, variables: tuple[str, ...], vars_file: Path | None, as_json: bool
) -> None:
    """Render version REF with variable values; every invalid value is reported at once."""
    from promptlab.prompts.templates import coerce_text_values  # heavy: see the top

    template = _labelled(ctx, ref).version.template
    values = _read_vars_file(vars_file) if vars_file else {}
    raw: dict[str, str] = {}
    for item in variables:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--var")
        raw[key] = value
    values.update(coerce_text_values(template, raw))
    # Report unknown names (usually typos) together with every invalid value.
    problems = [
        VariableProblem(name, "not a variable of this template")
        for name in sorted(set(values) - set(template.variable_names))
    ]
    try:
        messages = template.render(values)
    except VariableError as exc:
        problems.extend(exc.problems)
    if problems:
        raise VariableError(problems)
    if as_json:
        click.echo(json.dumps(messages, indent=2, ensure_ascii=False))
        return
    for message in messages:
        click.echo(f"[{message['role']}]\n{message['content'].rstrip()}\n")


@prompt.command("export")
@db_option
@click.argument("name")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
@handle_errors
def export(ctx: click.Context, name: str, output: Path | None) -> None:
    """Write NAME with all its versions and labels as a YAML prompt file."""
    path = route("/v1/prompts/{name}/export", name=name)
    text = through(ctx, str, "GET", path, lambda wb: wb.prompts.export(name))
    if output is None:
        click.echo(text, nl=False)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise PromptlabError(f"cannot write {output}: {exc.strerror}") from exc
        click.echo(f"wrote {output}")


def _labelled(ctx: click.Context, ref: str) -> LabelledVersion:
    """The version REF names and the labels pointing at it, here or from the server."""
    from promptlab.records.prompts import LabelledVersion

    path = route("/v1/prompt-refs/{ref}", ref=ref)
    return through(ctx, LabelledVersion, "GET", path, lambda wb: wb.prompts.labelled(ref))


def _text_of(file: Path) -> str:
    """The prompt file's text (load_prompt_file has just read and checked it)."""
    try:
        return file.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptlabError(f"{file}: cannot read: {exc}") from exc


#: A vars file holds the values of one render, which stops at 1,000,000 characters: the
#: limit of a YAML file (10 MiB) is plenty. It may be a single line.
VARS_FILE = LineLimits(line_bytes=10 * 2**20, file_bytes=10 * 2**20, kind="a vars file")


def _read_vars_file(path: Path) -> dict[str, object]:
    with open_lines(path, str(path), VARS_FILE, PromptlabError) as lines:
        text = "".join(line for _number, line in lines)
    try:
        data = strict_loads(text)
    except json.JSONDecodeError as exc:
        raise PromptlabError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg})") from exc
    except NotJsonError as exc:
        line = "" if exc.pos is None else f", line {text.count(chr(10), 0, exc.pos) + 1}"
        raise PromptlabError(f"{path}{line}: {exc.reason}") from exc
    if not isinstance(data, dict):
        raise PromptlabError(f"{path}: expected a JSON object of variable values")
    return data


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


commands: list[click.Command] = [init, prompt]
