from __future__ import annotations

from pathlib import Path

import pytest

from promptlab.config import DEMO_DIR
from promptlab.data.demo import load_demo_prompts
from promptlab.errors import PromptFileError
from promptlab.prompts.files import export_prompt, import_prompt_file, load_prompt_file
from promptlab.prompts.registry import Registry

SINGLE = """\
name: greeter
description: Says hello
message: first
params: {model: "sim:fast", temperature: 0.1}
variables:
  name: {type: string, maxLength: 20}
messages:
  - role: system
    content: |
      Be kind.
      Reply with JSON like {"greeting": "..."}
  - role: user
    content: Greet {{ name }}
"""


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_single_version_file_round_trips(tmp_path: Path, registry: Registry) -> None:
    results = import_prompt_file(registry, load_prompt_file(write(tmp_path, SINGLE)), "me")
    assert [r.version.semver for r in results] == ["1.0.0"]
    exported = export_prompt(registry, "greeter")
    assert "content: |\n      Be kind.\n" in exported  # block style keeps git diffs readable
    # Re-importing the export changes nothing and keeps the id.
    again = import_prompt_file(
        registry, load_prompt_file(write(tmp_path, exported, "e.yaml")), "me"
    )
    assert [r.created for r in again] == [False]
    assert again[0].version.id == results[0].version.id


def test_demo_files_load_with_versions_and_labels(registry: Registry) -> None:
    results = load_demo_prompts(registry)
    assert all(r.created for r in results)
    summaries = {s.name: s for s in registry.list_prompts()}
    assert len(summaries) >= 3
    assert all(s.version_count >= 2 for s in summaries.values())
    assert summaries["ticket-triage"].labels["production"] == "1.1.0"
    assert not any(r.created for r in load_demo_prompts(registry))  # idempotent


def test_export_then_import_into_a_fresh_registry_keeps_ids(
    tmp_path: Path, registry: Registry
) -> None:
    from promptlab.store import Store

    load_demo_prompts(registry)
    text = export_prompt(registry, "ticket-triage")
    with Store(tmp_path / "other.duckdb") as other_store:
        other = Registry(other_store)
        import_prompt_file(other, load_prompt_file(write(tmp_path, text)), "me")
        assert [v.id for v in other.versions("ticket-triage")] == [
            v.id for v in registry.versions("ticket-triage")
        ]
        assert other.labels("ticket-triage")["production"].semver == "1.1.0"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("just text", "expected a mapping"),
        ("messages: []", "field 'name' is required"),
        ("name: x\nmesages: []", "unknown field(s) mesages"),
        ("name: x\nversions: []", "'versions' must be a non-empty list"),
        ("name: x\nversions:\n  - messages: nope", "versions[0]: field 'messages'"),
        (
            "name: x\nversions:\n  - messages: [{role: user, content: ok}]\n"
            "  - messages: [{role: user, content: '{{ x.__class__ }}'}]",
            "versions[1]: messages[0] (user), line 1: attribute '__class__'",
        ),
        ("name: x\nmessages: [{role: user, content: hi}]\nlabels: [a]", "'labels' must map"),
        ("name: x\nmessages: [{role: user}]", "messages[0].content"),
        ("name: [unclosed", "line 1: not valid YAML"),
        (
            "name: 123\nmessages: [{role: user, content: hi}]",
            "field 'name' must be a string, got 123",
        ),
        ("name: ''\nmessages: [{role: user, content: hi}]", "field 'name' must not be empty"),
        (
            "name: x\ndescription: [a]\nmessages: [{role: user, content: hi}]",
            "field 'description' must be a string, got ['a']",
        ),
        (
            "name: x\nmessage: 5\nmessages: [{role: user, content: hi}]",
            "(top level): field 'message' must be a string, got 5",
        ),
        (
            "name: x\nversions:\n  - author: {a: 1}\n    messages: [{role: user, content: hi}]",
            "versions[0]: field 'author' must be a string, got {'a': 1}",
        ),
        ("name: x\nmessages: [{role: user, content: 123}]", "content: must be a string, got 123"),
        (
            "name: x\nmessages: [{role: user, content: '" + "x" * 200_001 + "'}]",
            "messages[0] (user): 200001 characters, more than the 200000 allowed in a message",
        ),
        (
            "name: x\nmessages: [{role: user, content: '" + "{% if a %}" * 5000 + "'}]",
            "messages[0] (user): nested more than 40 levels deep",
        ),
        ("name: x\nmessages: &m [{role: user, content: hi}, *m]", "alias to itself"),
    ],
)
def test_bad_files_name_file_and_field(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PromptFileError) as info:
        load_prompt_file(path)
    assert str(path) in str(info.value)
    assert fragment in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PromptFileError, match="cannot read"):
        load_prompt_file(tmp_path / "absent.yaml")


def test_demo_dir_exists() -> None:
    assert sorted(p.name for p in DEMO_DIR.glob("*.yaml"))


@pytest.mark.parametrize(
    ("tail", "fragment"),
    [
        (
            "  - version: 1.0.0\n    messages: [{role: user, content: 'A {{ x }}'}]\n"
            "  - version: 0.9.0\n    messages: [{role: user, content: 'B {{ x }}'}]\n",
            "versions[1].version: version 0.9.0 is lower than the automatic minor bump",
        ),
        (
            "  - messages: [{role: user, content: 'A {{ x }}'}]\nlabels: {production: 9.9.9}\n",
            "labels.production: '9.9.9' is neither a version in this file",
        ),
        (
            "  - messages: [{role: user, content: 'A {{ x }}'}]\nlabels: {Prod: 1.0.0}\n",
            "labels.Prod: use lowercase letters",
        ),
    ],
)
def test_a_file_that_cannot_be_imported_whole_saves_nothing(
    tmp_path: Path, registry: Registry, tail: str, fragment: str
) -> None:
    path = write(tmp_path, "name: atomic\nversions:\n" + tail)
    with pytest.raises(PromptFileError) as info:
        import_prompt_file(registry, load_prompt_file(path), "me")
    assert str(path) in str(info.value) and fragment in str(info.value)
    assert registry.is_empty()


def test_labels_may_point_at_versions_already_saved(tmp_path: Path, registry: Registry) -> None:
    first = write(tmp_path, "name: p\nmessages: [{role: user, content: 'A {{ x }}'}]\n")
    import_prompt_file(registry, load_prompt_file(first), "me")
    second = write(
        tmp_path,
        "name: p\nmessages: [{role: user, content: 'B {{ x }}'}]\nlabels: {stable: 1.0.0}\n",
        "second.yaml",
    )
    import_prompt_file(registry, load_prompt_file(second), "me")
    assert registry.labels("p")["stable"].semver == "1.0.0"
    assert registry.resolve("p").semver == "1.1.0"


NOTED = """name: noted
versions:
  - author: someone-else
    message: first
    messages: [{role: user, content: hi}]
"""


def _authors(db: Path) -> tuple[list[tuple[str, str]], list[str]]:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as conn:
        versions = conn.execute("SELECT author, message FROM prompt_versions").fetchall()
        actors = conn.execute(
            "SELECT actor FROM audit_events WHERE kind = 'prompt_version.created'"
        ).fetchall()
    return [(str(a), str(m)) for a, m in versions], [str(a) for (a,) in actors]


def test_a_file_s_author_is_a_note_and_the_version_is_the_importer_s(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from promptlab.cli import main

    monkeypatch.setenv("PROMPTLAB_AUTHOR", "real-person")
    file = tmp_path / "noted.yaml"
    file.write_text(NOTED)
    added = CliRunner().invoke(main, ["prompt", "add", str(file)])
    assert added.exit_code == 0, added.output
    versions, actors = _authors(db_path)
    assert versions == [("real-person", "first (the file names someone-else as its author)")]
    assert actors == ["real-person"]


def test_through_the_server_the_author_is_the_token_s_principal(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from promptlab.config import Settings
    from promptlab.server.api import create_app
    from promptlab.workbench import Workbench

    with Workbench.open(Settings.from_env()) as wb:
        _record, token = wb.tokens.create("erin", "editor")
        api = TestClient(create_app(wb, "owner-token-for-tests"))
        answer = api.post(
            "/v1/prompts",
            json={"text": NOTED, "source": "noted.yaml"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert answer.status_code == 201, answer.text
    versions, actors = _authors(db_path)
    assert versions == [("erin", "first (the file names someone-else as its author)")]
    assert actors == ["erin"]
