"""Docs that cannot drift (as sqlite-utils tests its docs): the README is short and starts
with the two commands, the MkDocs site builds strictly, every CLI command has help text
and a mention in the CLI reference, and every example in README.md and docs/**/*.md is
parsed: YAML loads (run specs, prompt files and experiment files through promptlab's own
parsers), Python compiles (the API page's example runs: tests/test_exported_members.py),
shell parses (`bash -n`) and each `promptlab` command in it names a real command with
real options."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml

from promptlab.cli import main
from promptlab.engine.spec.runspec import parse_spec
from promptlab.experiments.parsing import parse_experiment_file
from promptlab.prompts.files import parse_prompt_data

ROOT = Path(__file__).resolve().parent.parent
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = ROOT / "docs"
CLI_REFERENCE = DOCS / "reference" / "cli.md"
README_MAX_LINES = 250
#: Every Markdown file whose examples are checked.
PAGES = [README_PATH, *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
#: What runs `promptlab` at the start of a shell command.
LAUNCHERS = {"promptlab", ".venv/bin/promptlab", "bin/promptlab"}
#: Shell operators that end one command.
OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1", "("}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def code_blocks(langs: set[str]) -> Iterator[tuple[str, str]]:
    """(place, body) of every fenced block in a language of `langs`, in every page."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group("lang") in langs:
                line = text.count("\n", 0, match.start()) + 1
                yield f"{rel(page)}:{line}", match.group("body")


def blocks(*langs: str) -> list[object]:
    return [pytest.param(body, id=place) for place, body in code_blocks(set(langs))]


# ---- the README ------------------------------------------------------------------------


def test_readme_starts_with_the_two_commands() -> None:
    first_block = README.split("```bash", 1)[1].split("```", 1)[0]
    assert "make run" in first_block and "make test" in first_block


def test_readme_is_short() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest goes in docs/"


def test_readme_links_and_images_resolve() -> None:
    """GitHub follows the README's relative links; mkdocs does not check the README."""
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to missing {target}"


# ---- the site --------------------------------------------------------------------------


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    """A broken link or anchor, or a page left out of the nav, fails the build."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "index.html").is_file()
    # Nothing is asked of another host when a page opens (an offline machine's browser
    # waited on Google Fonts): every URL a page loads is the site's own.
    outside = re.compile(r"""(?:src|href)=["']?(?:https?:)?//(?!127\.0\.0\.1)""")
    loading = [
        page.relative_to(tmp_path)
        for page in tmp_path.rglob("*.html")
        if outside.search(re.sub(r"<a [^>]*>", "", page.read_text(errors="replace")))
    ]
    assert loading == []


# ---- the command line ------------------------------------------------------------------


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """promptlab's own commands (a plugin's are documented by its plugin)."""
    found: list[tuple[str, ...]] = []
    for name, command in group.commands.items():
        if not (command.callback is None or command.callback.__module__.startswith("promptlab.")):
            continue
        path = (*prefix, name)
        if isinstance(command, click.Group):
            found += leaf_commands(command, path)
        else:
            found.append(path)
    return found


@pytest.mark.parametrize("path", leaf_commands(main), ids=" ".join)
def test_command_is_documented(path: tuple[str, ...]) -> None:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    assert command.help, f"promptlab {' '.join(path)} has no help text"
    reference = CLI_REFERENCE.read_text(encoding="utf-8")
    assert f"promptlab {' '.join(path)}" in reference, f"{rel(CLI_REFERENCE)} omits {path}"


def shell_commands(body: str) -> Iterator[list[str]]:
    """Each command line of a shell block as tokens, continuations joined, comments and
    leading `$ ` prompts dropped."""
    joined = re.sub(r"\\\n", " ", body)
    for line in joined.splitlines():
        line = line.strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.commenters = "#"
        lexer.whitespace_split = True
        try:
            yield list(lexer)
        except ValueError:  # an unbalanced quote: bash -n reports it
            continue


#: Options whose value is a user or group name (the deployment guide's `promptlab` user).
ACCOUNT_OPTIONS = frozenset({"-u", "-g", "-o", "--user", "--group", "--owner"})


def promptlab_invocations(tokens: list[str]) -> Iterator[list[str]]:
    """The arguments of every `promptlab ...` in a command line (after env assignments,
    `time`, `python -m promptlab`), each up to the next shell operator."""
    for start, token in enumerate(tokens):
        after = None
        if start and tokens[start - 1] in ACCOUNT_OPTIONS:
            continue  # `sudo -u promptlab`, `install -g promptlab`: the service's account
        if token in LAUNCHERS:
            after = start + 1
        elif token == "-m" and tokens[start + 1 : start + 2] == ["promptlab"]:
            after = start + 2
        if after is None:
            continue
        arguments: list[str] = []
        for word in tokens[after:]:
            if word in OPERATORS:
                break
            arguments.append(word)
        yield arguments


def resolve(arguments: list[str]) -> tuple[list[click.Command], list[str]]:
    """The commands named (the group, its subgroups, the command) and what is left."""
    chain: list[click.Command] = [main]
    rest = list(arguments)
    while isinstance(chain[-1], click.Group) and rest:
        word = rest[0]
        if word.startswith("-"):
            # a group's option (--db FILE) before the command name
            option = next((p for p in chain[-1].params if word.split("=")[0] in p.opts), None)
            assert option is not None, f"{word} is not an option of {chain[-1].name}"
            rest = rest[1:] if option.is_flag or "=" in word else rest[2:]  # type: ignore[attr-defined]
            continue
        command = chain[-1].commands.get(word)
        if command is None:
            break
        chain.append(command)
        rest = rest[1:]
    return chain, rest


def options_of(chain: list[click.Command]) -> set[str]:
    found = {"--help", "-h"}
    for command in chain:
        for param in command.params:
            found.update(param.opts)
            found.update(param.secondary_opts)
    return found


@pytest.mark.parametrize("body", blocks("bash", "sh", "shell", "console"))
def test_shell_example_parses_and_its_promptlab_commands_exist(body: str) -> None:
    example = re.sub(r"^\$ ", "", body, flags=re.M)
    parsed = subprocess.run(["bash", "-n"], input=example, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    for tokens in shell_commands(body):
        for arguments in promptlab_invocations(tokens):
            chain, rest = resolve(arguments)
            if isinstance(chain[-1], click.Group) and chain[-1] is not main:
                assert not rest or rest[0].startswith("-"), (
                    f"promptlab {' '.join(arguments)}: no command {rest[0]!r}"
                )
            if chain[-1] is main:
                assert not rest or rest[0] in {"--help", "--version"}, (
                    f"promptlab {' '.join(arguments)}: no such command"
                )
            known = options_of(chain)
            for word in rest:
                if word.startswith("-") and word != "-" and not re.fullmatch(r"-\d.*", word):
                    name = word.split("=", 1)[0]
                    assert name in known, f"promptlab {' '.join(arguments)}: no option {name}"


# ---- YAML and Python -------------------------------------------------------------------


def parsed_as_what_it_is(data: object) -> str:
    """A run spec, prompt file or experiment file goes through promptlab's own parser (a
    field renamed in the code fails here); returns which it was."""
    if not isinstance(data, dict):
        return "fragment"
    if "variants" in data and "dataset" in data:
        parse_spec(data, base_dir=ROOT)
        return "run spec"
    if "versions" in data:
        parse_prompt_data(data)
        return "prompt file"
    if "variants" in data and "unit_column" in data:
        parse_experiment_file(data)
        return "experiment file"
    return "fragment"


@pytest.mark.parametrize("body", blocks("yaml", "yml"))
def test_yaml_example_loads_and_parses(body: str) -> None:
    data = yaml.safe_load(body)
    assert data is not None
    parsed_as_what_it_is(data)


def test_the_yaml_examples_include_whole_specs_prompts_and_experiments() -> None:
    kinds = {parsed_as_what_it_is(yaml.safe_load(body)) for _, body in code_blocks({"yaml"})}
    assert {"run spec", "prompt file", "experiment file"} <= kinds


@pytest.mark.parametrize("body", blocks("python", "py"))
def test_python_example_compiles(body: str) -> None:
    compile(body, "example", "exec")  # the API example also runs: tests/test_exported_members


def test_every_promptlab_variable_the_code_reads_is_in_the_configuration_page() -> None:
    """Each `PROMPTLAB_*` name in the library, the app or the Makefile has its row in
    docs/reference/configuration.md (nine were missing, the broker and server ones)."""
    root = Path(__file__).resolve().parent.parent
    sources = [
        *root.glob("promptlab/**/*.py"),
        *root.glob("pages/*.py"),
        root / "app.py",
        root / "Makefile",
    ]
    named = set()
    for source in sources:
        named |= set(re.findall(r"PROMPTLAB_[A-Z0-9_]+", source.read_text(errors="replace")))
    page = (root / "docs" / "reference" / "configuration.md").read_text()
    assert sorted(n for n in named if f"`{n}`" not in page) == []
