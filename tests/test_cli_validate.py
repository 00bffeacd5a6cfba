"""`promptlab validate`: a file of outputs checked against a schema file or a prompt's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from promptlab.cli import main

SCHEMA = {
    "type": "object",
    "required": ["category", "priority"],
    "properties": {
        "category": {"type": "string", "enum": ["bug", "billing"]},
        "priority": {"type": "string"},
        "items": {"type": "array", "items": {"properties": {"price": {"minimum": 0}}}},
    },
}
LINES: list[Any] = [
    '{"category": "bug", "priority": "low"}',
    {"id": "a-2", "output": "Sure:\n```json\n{'category': 'bug', 'priority': 'low',}\n```"},
    {"text": '{"category": 5, "items": [{"price": 1}, {"price": -1}]}'},
    {"output": '{"category": "bug", "prio', "finish_reason": "length"},
    {
        "custom_id": "req-5",
        "response": {
            "status_code": 200,
            "body": {
                "choices": [
                    {
                        "message": {"role": "assistant", "content": '{"category": "billing"}'},
                        "finish_reason": "stop",
                    }
                ]
            },
        },
    },
]


def write(tmp_path: Path, lines: list[Any], name: str = "outputs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "\n")
    return path


def validate(*args: str) -> Result:
    return CliRunner().invoke(main, ["validate", *args])


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return path


def test_each_line_with_every_error_path_and_a_summary(tmp_path: Path, schema_file: Path) -> None:
    result = validate("--schema", str(schema_file), str(write(tmp_path, LINES)))
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == [
        "line 1: valid",
        "line 2 (a-2): repaired",
        "line 3: invalid",
        "  $.category: 5 is not of type 'string'",
        "  $.category: 5 is not one of ['bug', 'billing']",
        "  $.items[1].price: -1 is less than the minimum of 0",
        "  $.priority: is required but missing",
        "line 4: truncated",
        "  $: cut off at the token limit (finish_reason length)",
        "  $.priority: is required but missing",
        "line 5 (req-5): invalid",
        "  $.priority: is required but missing",
        "5 outputs: 1 valid, 1 repaired, 2 invalid, 1 truncated",
    ]


def test_json_lines_for_machines(tmp_path: Path, schema_file: Path) -> None:
    result = validate("--schema", str(schema_file), "--json", str(write(tmp_path, LINES)))
    assert result.exit_code == 1
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r.get("status") for r in records[:-1]] == [
        "valid",
        "repaired",
        "invalid",
        "truncated",
        "invalid",
    ]
    assert records[1]["id"] == "a-2" and records[0]["id"] is None
    assert records[2]["errors"][-1] == "$.priority: is required but missing"
    assert records[-1] == {
        "summary": {"outputs": 5, "valid": 1, "repaired": 1, "invalid": 2, "truncated": 1}
    }


def test_all_usable_exits_0(tmp_path: Path, schema_file: Path) -> None:
    result = validate("--schema", str(schema_file), str(write(tmp_path, LINES[:2])))
    assert result.exit_code == 0, result.output
    assert (
        result.stdout.splitlines()[-1] == "2 outputs: 1 valid, 1 repaired, 0 invalid, 0 truncated"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        ("42", "line 2: expected a JSON string or an object with `output` or `text`"),
        ('{"answer": "x"}', "line 2: expected a JSON string or an object with `output` or `text`"),
        ('{"output": 7}', "line 2: `output` must be a string"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, schema_file: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(f'"{{}}"\n{line}\n')
    result = validate("--schema", str(schema_file), str(path))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: outputs {path}, {message}")


def test_a_bad_schema_is_refused_with_its_path(tmp_path: Path) -> None:
    schema = tmp_path / "bad-schema.json"
    schema.write_text(json.dumps({"properties": {"price": {"minimum": "0"}}}))
    result = validate("--schema", str(schema), str(write(tmp_path, LINES)))
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"error: schema {schema}.properties.price.minimum: '0' is not of type 'number'"
    )


def test_a_prompt_versions_schema(tmp_path: Path, db_path: Path) -> None:
    assert CliRunner().invoke(main, ["init", "--demo"]).exit_code == 0
    outputs = write(
        tmp_path,
        [
            '{"category": "bug", "priority": "low", "summary": "x", "needs_human": false}',
            '{"category": "bug", "priority": "low", "summary": "x"}',
        ],
    )
    result = validate("--prompt", "ticket-triage", str(outputs))  # the latest: needs_human
    assert result.stdout.splitlines()[:3] == [
        "line 1: valid",
        "line 2: invalid",
        "  $.needs_human: is required but missing",
    ], result.output
    both = validate("--prompt", "x", "--schema", "y.json", str(outputs))
    assert both.exit_code == 2 and "either --schema SCHEMA.json or --prompt REF" in both.output


def test_rules_from_a_file_are_checked_on_usable_outputs(tmp_path: Path, schema_file: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n"
        "  - {name: bugs only, expr: \"category == 'bug'\"}\n"
        "  - {name: terse, expr: 'size(priority) <= 3', severity: warning}\n"
    )
    outputs = write(
        tmp_path,
        [
            '{"category": "bug", "priority": "low"}',
            '{"category": "billing", "priority": "high"}',
            '{"category": "bug", "priority": "urgent"}',
        ],
    )
    result = validate("--schema", str(schema_file), "--rules", str(rules), str(outputs))
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == [
        "line 1: valid",
        "line 2: valid, rules failed",
        "  rule bugs only: `category == 'bug'` is false",
        "  rule terse (warning): `size(priority) <= 3` is false",
        "line 3: valid, rules warned",
        "  rule terse (warning): `size(priority) <= 3` is false",
        "3 outputs: 3 valid, 0 repaired, 0 invalid, 0 truncated; 1 failed a rule",
    ]
    as_json = validate("--schema", str(schema_file), "--rules", str(rules), "--json", str(outputs))
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r.get("rules") for r in records[:3]] == ["passed", "failed", "warned"]
    assert records[-1]["summary"]["rules_failed"] == 1
    rules.write_text("- {expr: 'size(x) <'}\n")
    bad = validate("--schema", str(schema_file), "--rules", str(rules), str(outputs))
    assert bad.exit_code == 1
    assert (
        bad.stderr.strip()
        == f"error: rules {rules}[0]: syntax error at the end (column 10): invalid syntax"
    )
