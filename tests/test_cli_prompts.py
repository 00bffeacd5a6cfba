from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    db = tmp_path / "demo.duckdb"
    assert run("--db", str(db), "init", "--demo").exit_code == 0
    return db


def test_init_demo_then_list(demo_db: Path) -> None:
    result = run("--db", str(demo_db), "prompt", "list")
    assert result.exit_code == 0
    assert "ticket-triage" in result.output and "production=1.1.0" in result.output
    again = run("init", "--demo", "--db", str(demo_db))  # --db after the command works too
    assert "0 new versions" in again.output


def test_diff_shows_changed_lines(demo_db: Path) -> None:
    result = run("--db", str(demo_db), "prompt", "diff", "ticket-triage", "1.0.0", "production")
    assert result.exit_code == 0
    assert '+Priority rules: "urgent" only when' in result.output


def test_add_show_label_history_export(tmp_path: Path) -> None:
    db = str(tmp_path / "x.duckdb")
    spec = tmp_path / "hello.yaml"
    spec.write_text(
        "name: hello\nmessages:\n  - role: user\n    content: Hi {{ who }}\n", encoding="utf-8"
    )
    assert "saved hello@1.0.0" in run("--db", db, "prompt", "add", str(spec)).output
    assert "no changes" in run("--db", db, "prompt", "add", str(spec)).output
    spec.write_text(
        "name: hello\nmessages:\n  - role: user\n    content: Hello {{ who }}\n", encoding="utf-8"
    )
    assert "saved hello@1.1.0" in run("--db", db, "prompt", "add", str(spec)).output
    assert (
        "hello@production -> 1.0.0"
        in run("--db", db, "prompt", "label", "hello", "1.0.0", "production").output
    )
    shown = run("--db", db, "prompt", "show", "hello@production").output
    assert "hello@1.0.0" in shown and "labels: production" in shown and "Hi {{ who }}" in shown
    history = run("--db", db, "prompt", "history", "hello").output
    assert "1.1.0" in history and "production" in history
    out = tmp_path / "out.yaml"
    assert run("--db", db, "prompt", "export", "hello", "-o", str(out)).exit_code == 0
    assert "version: 1.1.0" in out.read_text()


def test_render_keeps_values_literal(demo_db: Path) -> None:
    result = run(
        "--db", str(demo_db), "prompt", "render", "ticket-triage@production",
        "--var", "ticket={{ 7*7 }} {{ x.__class__ }}", "--json",
    )  # fmt: skip
    assert result.exit_code == 0
    messages = json.loads(result.output)
    assert messages[-1]["content"] == "Ticket:\n{{ 7*7 }} {{ x.__class__ }}\n"


def test_render_reports_every_problem(demo_db: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["--db", str(demo_db), "prompt", "render", "article-summarizer",
         "--var", "max_words=lots", "--var", "tilte=x"],
    )  # fmt: skip
    assert result.exit_code == 1
    for fragment in ("tilte: not a variable", "max_words:", "article:", "title:"):
        assert fragment in result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["prompt", "show", "nope"], "no prompt named 'nope'"),
        (["prompt", "show", "ticket-triage@9.0.0"], "no such version"),
        (["prompt", "label", "ticket-triage", "1.0.0", "Bad Label"], "label 'Bad Label'"),
        (["prompt", "diff", "ticket-triage", "1.0.0", "nope"], "no version, hash or label"),
    ],
)
def test_errors_are_one_line_with_nonzero_exit(
    demo_db: Path, args: list[str], fragment: str
) -> None:
    result = CliRunner().invoke(main, ["--db", str(demo_db), *args])
    assert result.exit_code == 1
    assert fragment in result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1


def test_unsafe_template_is_refused_and_nothing_saved(tmp_path: Path) -> None:
    db = str(tmp_path / "x.duckdb")
    spec = tmp_path / "evil.yaml"
    spec.write_text(
        "name: evil\nversions:\n"
        "  - messages: [{role: user, content: 'fine {{ a }}'}]\n"
        "  - messages: [{role: user, content: \"{{ ''.__class__.__mro__ }}\"}]\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["--db", db, "prompt", "add", str(spec)])
    assert result.exit_code == 1
    assert "evil.yaml: versions[1]: messages[0] (user), line 1: attribute" in result.output
    assert "no prompts yet" in run("--db", db, "prompt", "list").output


def test_every_command_has_help() -> None:
    def walk(group: object, prefix: list[str]) -> list[list[str]]:
        found = [prefix]
        for name, command in getattr(group, "commands", {}).items():
            found += walk(command, [*prefix, name])
        return found

    for path in walk(main, []):
        result = run(*path, "--help")
        assert result.exit_code == 0, path
        command = main
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        assert command.help, f"`promptlab {' '.join(path)}` has no help text"


def test_console_script_and_module_entry_points(tmp_path: Path) -> None:
    module = subprocess.run(
        [sys.executable, "-m", "promptlab", "--help"], capture_output=True, text=True
    )
    assert module.returncode == 0 and "prompt" in module.stdout
    script = shutil.which("promptlab", path=str(Path(sys.executable).parent))
    assert script, "the promptlab console script is not installed in this environment"
    result = subprocess.run([script, "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and "version" in result.stdout
