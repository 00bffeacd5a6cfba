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
        "--db",
        str(demo_db),
        "prompt",
        "render",
        "ticket-triage@production",
        "--var",
        "ticket={{ 7*7 }} {{ x.__class__ }}",
        "--json",
    )
    assert result.exit_code == 0
    messages = json.loads(result.output)
    assert messages[-1]["content"] == "Ticket:\n{{ 7*7 }} {{ x.__class__ }}\n"


def test_render_reports_every_problem(demo_db: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "--db",
            str(demo_db),
            "prompt",
            "render",
            "article-summarizer",
            "--var",
            "max_words=lots",
            "--var",
            "tilte=x",
        ],
    )
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


def one_error_line(result: Result) -> str:
    """The run failed with exit code 1 and exactly one line, `error: ...`."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def laughs(levels: int) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"name: caf\xe9\nmessages: [{role: user, content: hi}]\n", "line 1: not UTF-8 text"),
        (b"[" * 10_000 + b"]" * 10_000, "nested more than 100 levels deep"),
        (b"name: x\nmessages: &m [{role: user, content: *m}]\n", "alias to itself"),
        (laughs(9).encode(), "more than 1000000 values"),
        (
            b"name: x\nmessages: [{role: user, content: '" + b"{% if a %}" * 5000 + b"'}]\n",
            "messages[0] (user): nested more than 40 levels deep",
        ),
        (
            b"name: x\nmessages: [{role: user, content: '" + b"x" * 20 * 2**20 + b"'}]\n",
            "more than 10485760 bytes",
        ),
        (
            b"name: x\nmessages: [{role: user, content: '" + b"x" * 300_000 + b"'}]\n",
            "(top level): messages[0] (user): 300000 characters, more than the 200000 allowed",
        ),
        (b"name: 123\nmessages: [{role: user, content: hi}]\n", "'name' must be a string, got 123"),
    ],
)
def test_bad_prompt_files_are_one_line_and_save_nothing(
    demo_db: Path, tmp_path: Path, content: bytes, fragment: str
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_bytes(content)
    before = run("--db", str(demo_db), "prompt", "list").output
    line = one_error_line(
        CliRunner().invoke(main, ["--db", str(demo_db), "prompt", "add", str(spec)])
    )
    assert str(spec) in line and fragment in line
    assert run("--db", str(demo_db), "prompt", "list").output == before


def test_render_stops_at_the_loop_limit(tmp_path: Path) -> None:
    db = str(tmp_path / "x.duckdb")
    spec = tmp_path / "loops.yaml"
    spec.write_text(
        "name: loops\nmessages:\n  - role: user\n    content: >-\n"
        "      {% for a in xs %}{% for b in xs %}{% for c in xs %}{% for d in xs %}"
        "{{ d }}{% endfor %}{% endfor %}{% endfor %}{% endfor %}\n",
        encoding="utf-8",
    )
    assert run("--db", db, "prompt", "add", str(spec)).exit_code == 0
    result = CliRunner().invoke(
        main, ["--db", db, "prompt", "render", "loops", "--var", f"xs={list(range(20))}"]
    )
    assert "messages[0] (user): more than 100000 loop iterations" in one_error_line(result)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["prompt", "export", "ticket-triage", "-o", "/nonexistent/x.yaml"],
            "cannot write /nonexistent/x.yaml: No such file or directory",
        ),
        (
            ["prompt", "export", "ticket-triage", "-o", "{tmp}/demo.duckdb/x.yaml"],
            "cannot write {tmp}/demo.duckdb/x.yaml: Not a directory",
        ),
    ],
)
def test_export_to_a_path_that_cannot_be_written(
    demo_db: Path, tmp_path: Path, args: list[str], fragment: str
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(main, ["--db", str(demo_db), *args])
    assert fragment.replace("{tmp}", str(tmp_path)) in one_error_line(result)


@pytest.mark.parametrize("command", [["init"], ["init", "--demo"], ["prompt", "list"]])
@pytest.mark.parametrize(
    ("db", "fragment"),
    [
        ("{file}/x.duckdb", "cannot create the folder"),
        ("{file}/sub/x.duckdb", "cannot create the folder"),
        ("{file}", "not a valid DuckDB database file"),
    ],
)
def test_unusable_db_paths_are_one_line(
    tmp_path: Path, command: list[str], db: str, fragment: str
) -> None:
    regular = tmp_path / "regular-file"
    regular.write_text("not a database", encoding="utf-8")
    result = CliRunner().invoke(main, ["--db", db.format(file=regular), *command])
    assert fragment in one_error_line(result)
    assert regular.read_text(encoding="utf-8") == "not a database"
