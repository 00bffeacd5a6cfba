"""One door (issue 37) for `promptlab dataset ...` and `promptlab validate`: with a server
owning the database, each command calls typed routes (the file to import read here and
streamed), never `POST /v1/cli`, and prints exactly what it prints on its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.one_door_helpers import assert_same_both_ways

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"

READING = [
    ["dataset", "list"],
    ["dataset", "show", "tickets"],
    ["dataset", "show", "tickets", "--rows", "0"],
    ["dataset", "show", "tickets", "--rows", "2000"],  # more than a preview page: streamed
    ["dataset", "show", "no-such"],
    ["dataset", "check", "tickets", "ticket-triage@production"],
    ["dataset", "check", "tickets", "ticket-triage@production", "--listed", "0"],
    ["dataset", "check", "tickets", "no-such-prompt"],
    ["dataset", "check", "no-such", "ticket-triage@production"],
    ["dataset", "session", "tickets"],  # not a conversation log: refused the same
    ["dataset", "session", "no-such", "s1"],
    ["validate", "{outputs}", "--prompt", "ticket-triage@production"],
    ["validate", "{outputs}", "--prompt", "ticket-triage@production", "--json"],
    ["validate", "{outputs}", "--prompt", "no-such-prompt"],
    ["validate", "{outputs}", "--schema", "{schema}"],  # no database at all
]

CHANGING = [
    ["dataset", "import", "{small}", "--name", "small"],
    ["dataset", "import", "{small}", "--name", "small"],  # exists: refused
    ["dataset", "import", "{small}", "--name", "small", "--replace", "--unit-column", "user"],
    ["dataset", "import", "{small}", "--name", "small2", "--unit-column", "nope"],
    ["dataset", "import", "{small_txt}", "--name", "as-csv", "--format", "csv"],
    ["dataset", "import", "{small_txt}", "--name", "txt"],  # no format from the suffix
    ["dataset", "import", "{bad_jsonl}", "--name", "bad"],  # names its line
    ["dataset", "import", "{empty}", "--name", "empty"],
    ["dataset", "import", "{missing}", "--name", "missing"],
    ["dataset", "import", "{small}", "--name", "Bad Name"],
    ["dataset", "import", "{chats}", "--name", "chats", "--conversation"],
    ["dataset", "import", "{chats}", "--name", "chats2", "--order-column", "at"],
    ["dataset", "import", "{chats}", "--name", "chats3", "--role-column", "topic"],
    ["dataset", "list"],
    ["dataset", "show", "small"],
    ["dataset", "session", "chats2"],
    ["dataset", "session", "chats2", "chat-001"],
    ["dataset", "session", "chats2", "no-such-session"],
    ["dataset", "unit", "small", "text"],
    ["dataset", "unit", "small", "no-such-column"],
    ["dataset", "unit", "no-such", "text"],
    ["dataset", "show", "small"],
    ["dataset", "delete", "small"],
    ["dataset", "delete", "small"],
    ["dataset", "list"],
]


@pytest.fixture
def db(demo_db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "datasets.duckdb"
    shutil.copyfile(demo_db, copy)
    return copy


def _files(tmp_path: Path) -> dict[str, str]:
    small = tmp_path / "small.csv"
    small.write_text('user,text\nu1,=1+1 hello\nu2,héllo\nu3,"a, b"\n', encoding="utf-8")
    small_txt = tmp_path / "small.txt"
    small_txt.write_text("user,text\nu1,x\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{"a": NaN}\n')
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    outputs = tmp_path / "outputs.jsonl"
    lines = [
        {"id": "a", "output": json.dumps({"category": "billing", "priority": "low"})},
        {"id": "b", "output": "not json"},
        {"id": "c", "output": '{"category": "billing"'},
        "plain text",
    ]
    outputs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["category"]}))
    return {
        "small": str(small),
        "small_txt": str(small_txt),
        "bad_jsonl": str(bad),
        "empty": str(empty),
        "missing": str(tmp_path / "missing.csv"),
        "chats": str(DEMO / "conversations" / "chats.csv"),
        "outputs": str(outputs),
        "schema": str(schema),
    }


def test_dataset_commands_and_validate_print_the_same_through_a_server(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called = assert_same_both_ways(
        db, tmp_path, monkeypatch, reading=READING, changing=CHANGING, values=_files(tmp_path)
    )
    for route in (
        "GET /v1/datasets",
        "GET /v1/datasets/tickets/rows",
        "GET /v1/datasets/tickets/check",
        "GET /v1/output-checks",
        "POST /v1/datasets",
        "GET /v1/datasets/chats2/sessions",
        "GET /v1/datasets/chats2/sessions/chat-001",
        "PUT /v1/datasets/small/unit-column",
        "DELETE /v1/datasets/small",
    ):
        assert route in called, (route, called)
    # A file refused before it is read is refused here: nothing is sent for it.
    assert called.count("POST /v1/datasets") == 9, called
