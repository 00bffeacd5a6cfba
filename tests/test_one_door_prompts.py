"""One door for `promptlab init` and `promptlab prompt ...` (issue 37): with a server
owning the database, each command calls its typed routes (server/prompt_routes.py and
the label route), never `POST /v1/cli`, and prints exactly what it prints on its own,
errors and exit codes included. Files are read and written here: a prompt file goes as
its text, an export comes back as text."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import Result

from tests.one_door_helpers import assert_same_both_ways, invoke, record_routes, unserved
from tests.test_server import Served

HELLO = "name: hello\nmessages:\n  - role: user\n    content: Hi {{ who }}\n"

#: Commands that change nothing (on the demo database): run directly, then through a
#: server, on one database.
READING = [
    ["init"],
    ["prompt", "list"],
    ["prompt", "show", "ticket-triage"],
    ["prompt", "show", "ticket-triage@production"],
    ["prompt", "show", "ticket-triage@{prefix}"],
    ["prompt", "show", "no-such"],  # an unknown prompt: the same line, the same exit code
    ["prompt", "show", "ticket-triage@9.9.9"],
    ["prompt", "history", "ticket-triage"],
    ["prompt", "history", "no-such"],
    ["prompt", "diff", "ticket-triage", "1.0.0", "2.0.0"],
    ["prompt", "diff", "ticket-triage", "1.0.0", "production"],
    ["prompt", "diff", "ticket-triage", "1.0.0", "1.0.0"],
    ["prompt", "diff", "no-such", "1.0.0", "2.0.0"],
    ["prompt", "render", "ticket-triage@production", "--var", "ticket=hi {{ 7*7 }}"],
    ["prompt", "render", "ticket-triage", "--var", "ticket=a/b", "--json"],
    ["prompt", "render", "ticket-triage", "--vars-file", "{vars}"],
    ["prompt", "render", "ticket-triage", "--vars-file", "{bad_vars}"],
    ["prompt", "render", "ticket-triage", "--var", "tickte=typo"],
    ["prompt", "render", "ticket-triage", "--var", "novalue"],
    ["prompt", "render", "no-such", "--var", "ticket=x"],
    ["prompt", "export", "ticket-triage"],
    ["prompt", "export", "ticket-triage", "-o", "{out}"],
    ["prompt", "export", "ticket-triage", "-o", "{tmp}/no-such-folder/x.yaml"],
    ["prompt", "export", "no-such", "-o", "{tmp}/never.yaml"],
]

#: Commands that change the database: in order, on a copy each way.
CHANGING = [
    ["prompt", "add", "{hello}"],
    ["prompt", "add", "{hello}"],  # the same content: no changes
    # Through a server the version is the token's principal's (here "tester on behalf
    # of grace", the owner's token being a service's): what is printed is the same.
    ["prompt", "add", "{greeting}", "--author", "grace"],
    ["prompt", "add", "{hello2}"],
    ["prompt", "add", "{bad}"],  # a bad file: refused here, nothing sent
    ["prompt", "add", "{unsafe}"],
    ["prompt", "add", "{tmp}/missing.yaml"],
    ["prompt", "add", "{labels}"],  # a file whose label names no version of it
    ["prompt", "list"],
    ["prompt", "show", "hello@1.0.0"],
    ["prompt", "label", "hello", "1.0.0", "production"],
    ["prompt", "label", "hello", "1.1.0", "staging", "--expect-version", "none"],
    ["prompt", "label", "ticket-triage", "2.0.0", "production", "--expect-version", "2.0.0"],
    ["prompt", "label", "ticket-triage", "2.0.0", "canary", "--expect-version", "1.0.0"],
    ["prompt", "label", "ticket-triage", "9.9.9", "staging"],
    ["prompt", "label", "ticket-triage", "1.0.0", "Not A Label"],
    ["prompt", "label", "no-such", "1.0.0", "production"],
    ["prompt", "show", "hello@production"],
    ["prompt", "diff", "hello", "production", "staging"],
    ["prompt", "export", "hello"],
]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "files"
    folder.mkdir()
    written = {
        "hello": HELLO,
        "hello2": HELLO.replace("Hi", "Hello"),
        "greeting": HELLO.replace("name: hello", "name: greeting"),
        "bad": "name: bad\nmessages: [unclosed\n",
        "unsafe": "name: x\nmessages:\n  - role: user\n    content: '{{ x.__class__ }}'\n",
        "labels": HELLO.replace("name: hello", "name: other") + "labels: {production: 9.0.0}\n",
        "vars": '{"ticket": "from a file"}\n',
        "bad_vars": "[1, 2]\n",
    }
    paths = {}
    for name, text in written.items():
        path = folder / f"{name}.{'json' if 'vars' in name else 'yaml'}"
        path.write_text(text, encoding="utf-8")
        paths[name] = str(path)
    return {**paths, "tmp": str(tmp_path), "out": str(tmp_path / "exported.yaml")}


def _prefix(db: Path) -> str:
    from promptlab.store import Store

    with Store(db) as store, store.read() as cur:
        row = cur.execute("SELECT id FROM prompt_versions WHERE semver = '1.0.0' LIMIT 1")
        return str(row.fetchone()[0])[:16]


def test_prompt_commands_print_the_same_through_a_server(
    demo_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]
) -> None:
    called = assert_same_both_ways(
        demo_db,
        tmp_path,
        monkeypatch,
        reading=READING,
        changing=CHANGING,
        values={**files, "prefix": _prefix(demo_db)},
    )
    routes = {re.sub(r"/v1/(prompts|prompt-refs|runs)/[^/]+", r"/v1/\1/X", p) for p in called}
    assert routes >= {
        "GET /v1/health",
        "GET /v1/prompts",
        "POST /v1/prompts",
        "GET /v1/prompt-refs/X",
        "GET /v1/prompts/X/history",
        "GET /v1/prompts/X/diff",
        "GET /v1/prompts/X/export",
        "PUT /v1/prompts/X/labels/production",
    }, routes
    # The export written here through the server is the one printed.
    exported = invoke(demo_db, ["prompt", "export", "ticket-triage"]).stdout
    assert Path(files["out"]).read_text(encoding="utf-8") == exported


def test_a_bad_prompt_file_is_refused_here_and_never_sent(
    demo_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: x\nmessages: [{role: user, content: \xff}]\n")
    called = record_routes(monkeypatch)
    server = Served(demo_db)
    try:
        result = invoke(demo_db, ["prompt", "add", str(bad)])
    finally:
        server.stop()
    assert result.exit_code == 1 and "not UTF-8 text" in result.stderr
    assert called == []


def test_the_server_checks_a_prompt_file_s_text_again(demo_db: Path) -> None:
    """The client's check is a courtesy: a caller sending text straight is refused the same."""
    server = Served(demo_db)
    try:
        status, answer = server.call(
            "POST", "/v1/prompts", {"text": "name: x\nmessages: [oops", "source": "x.yaml"}
        )
        assert status == 400 and answer["error"].startswith("x.yaml")
        assert answer["kind"] == "PromptFileError"
        unsafe = "name: x\nmessages:\n  - {role: user, content: '{{ x.__class__ }}'}\n"
        status, answer = server.call("POST", "/v1/prompts", {"text": unsafe, "source": "u.yaml"})
        assert status == 400 and "__class__" in answer["error"]
        status, listed = server.call("GET", "/v1/prompts")
        assert status == 200 and "x" not in {p["name"] for p in listed}
    finally:
        server.stop()


@pytest.mark.parametrize("fresh", [True, False], ids=["new database", "demo database"])
def test_init_demo_prints_the_same_through_the_server(
    demo_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: bool
) -> None:
    """On a new database the server loads the demo it ships and starts the demo run,
    followed from here; on one with the demo and runs, nothing new and no run. (On two
    databases: only their paths and the run's id differ.)"""
    alone_db, served_db = tmp_path / "alone.duckdb", tmp_path / "served.duckdb"
    if not fresh:
        shutil.copyfile(demo_db, alone_db)
        shutil.copyfile(demo_db, served_db)
    called = record_routes(monkeypatch)
    alone = invoke(alone_db, ["init", "--demo"])
    server = Served(served_db)
    try:
        through = invoke(served_db, ["init", "--demo"])
        shown = invoke(served_db, ["prompt", "list"])
    finally:
        server.stop()

    def neutral(result: Result, name: str, stderr: str) -> tuple[int, str, str]:
        out = re.sub(r"run_[0-9a-f]+", "RUN", result.stdout.replace(name, "DB"))
        return result.exit_code, out, stderr

    said = unserved(through, server)
    assert neutral(through, "served.duckdb", said) == neutral(alone, "alone.duckdb", alone.stderr)
    assert alone.exit_code == 0, alone.stderr
    ran = "completed, 800 items" in through.stdout
    assert ran == fresh and "ticket-triage" in shown.stdout, through.stdout
    assert "POST /v1/demo" in called and not [p for p in called if p.endswith("/v1/cli")]
