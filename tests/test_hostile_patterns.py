"""No regular expression a user wrote can stall a run, a page or the process: schema
`pattern`s, rule patterns and `matches()` run on RE2 (linear time), and the constructs
RE2 cannot run are refused when saved or submitted, with the pattern's path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from promptlab.checks import patterns
from promptlab.checks.rules import RuleSet, RuleStatus, parse_rules
from promptlab.checks.validation import Checker, CheckStatus, check_schema
from promptlab.engine import parse_spec
from promptlab.errors import PromptlabError, TemplateError
from promptlab.prompts.templates import Template
from promptlab.store import Store
from promptlab.workbench import Workbench

#: Catastrophic for a backtracking engine: minutes (or forever) on these texts.
EVIL_SCHEMA_PATTERN = "^(a+)+$"
EVIL_TEXT = "a" * 40 + "!"
EVIL_RULE_PATTERN = "^(.*.*)*XYZ$"

pytestmark = pytest.mark.timeout(120)


def test_validate_with_a_catastrophic_schema_pattern_finishes(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps({"properties": {"code": {"type": "string", "pattern": EVIL_SCHEMA_PATTERN}}})
    )
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text(json.dumps({"output": json.dumps({"code": EVIL_TEXT})}) + "\n")
    # A child process: a backtracking engine would hold it far past this bound.
    done = subprocess.run(
        [sys.executable, "-m", "promptlab", "validate", "--schema", str(schema), str(outputs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "line 1: invalid" in done.stdout
    assert f"does not match '{EVIL_SCHEMA_PATTERN}'" in done.stdout


def test_schema_patterns_and_pattern_properties_run_on_re2() -> None:
    checker = Checker(
        {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": EVIL_SCHEMA_PATTERN}},
            "patternProperties": {"^(x+)+$": {"type": "integer"}},
            "additionalProperties": False,
        }
    )
    assert checker.check(json.dumps({"code": "aaa", "xx": 1})).status is CheckStatus.VALID
    bad = checker.check(json.dumps({"code": EVIL_TEXT, "x" * 40 + "!": 1, "xxx": "s"}))
    assert bad.status is CheckStatus.INVALID
    assert bad.errors == (
        f"$: '{'x' * 40}!' does not match any of the regexes: '^(x+)+$'",
        f"$.code: '{EVIL_TEXT}' does not match '{EVIL_SCHEMA_PATTERN}'",
        "$.xxx: 's' is not of type 'integer'",
    )


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"properties": {"code": {"type": "string", "pattern": "(?=x)y"}}},
            "output_schema.properties.code.pattern: '(?=x)y' is not a regex RE2 can run",
        ),
        (
            {"patternProperties": {"^(a)\\1$": {}}},
            "output_schema.patternProperties[\"^(a)\\\\1$\"]: '^(a)\\\\1$' is not a regex RE2",
        ),
        (
            {"$defs": {"d": {"pattern": "(?<!x)y"}}},
            "output_schema[\"$defs\"].d.pattern: '(?<!x)y' is not a regex RE2 can run",
        ),
        (
            {"patternProperties": {"^x": {}}, "unevaluatedProperties": False},
            "output_schema.unevaluatedProperties: unevaluatedProperties cannot be combined",
        ),
    ],
)
def test_patterns_re2_cannot_run_are_refused_with_their_path(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(TemplateError) as caught:
        check_schema(schema)
    assert str(caught.value).startswith(message), caught.value


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            {"field": "a", "pattern": "(a)\\1"},
            "rules[0].pattern: '(a)\\\\1' is not a regex RE2 can run",
        ),
        (
            {"name": "n", "expr": "matches(a, '(?<=x)y')"},
            "rules[0] (n): column 1: matches(): '(?<=x)y' is not a regex RE2 can run",
        ),
        ({"field": "a", "pattern": 7}, "rules[0].pattern: expected a regex as text"),
    ],
)
def test_rule_patterns_re2_cannot_run_are_refused_when_saved(
    rule: dict[str, Any], message: str
) -> None:
    with pytest.raises(TemplateError) as caught:
        parse_rules([rule])
    assert str(caught.value).startswith(message), caught.value


def test_a_template_with_such_a_pattern_is_not_saved() -> None:
    with pytest.raises(TemplateError, match=r"^output_schema\.properties\.a\.pattern: "):
        Template.build(
            [{"role": "user", "content": "{{ x }}"}],
            output_schema={"properties": {"a": {"pattern": "(x)\\1"}}},
        )
    with pytest.raises(TemplateError, match=r"^variables\.x\.pattern: "):
        Template.build(
            [{"role": "user", "content": "{{ x }}"}],
            variables={"x": {"type": "string", "pattern": "(?=a)"}},
        )


def test_rules_match_in_linear_time_and_a_run_time_pattern_is_a_rule_error() -> None:
    rules = RuleSet(
        parse_rules(
            [
                {"name": "literal", "expr": f"matches(summary, '{EVIL_RULE_PATTERN}')"},
                {"name": "field", "field": "summary", "pattern": EVIL_RULE_PATTERN},
                {"name": "computed", "expr": "matches(summary, pattern)"},
            ]
        )
    )
    status, failed = rules.check({"summary": "x" * 5_000, "pattern": "(a)\\1"})
    assert status is RuleStatus.FAILED
    assert [o.rule.name for o in failed] == ["literal", "field", "computed"]
    assert failed[1].message.startswith("summary: 'xxxx")
    assert len(failed[1].message) < 200  # the value is shortened, not echoed whole
    assert "rule error: PatternError" in failed[2].message


def test_a_variable_pattern_runs_on_re2() -> None:
    template = Template.build(
        [{"role": "user", "content": "{{ code }}"}],
        variables={"code": {"type": "string", "pattern": EVIL_SCHEMA_PATTERN}},
    )
    with pytest.raises(PromptlabError, match="does not match"):
        template.validate_values({"code": EVIL_TEXT})


def test_search_is_unanchored_and_caps_the_pattern() -> None:
    assert patterns.search("b+", "abbbc")
    assert not patterns.search("^b", "abc")
    with pytest.raises(patterns.PatternError, match="longer than"):
        patterns.compile_pattern("a" * (patterns.MAX_PATTERN_CHARS + 1))
    with pytest.raises(patterns.PatternError, match="not a regex RE2 can run"):
        patterns.compile_pattern("(a{999}){999}")


def _spec(tmp_path: Path, name: str, rules: list[dict[str, Any]]) -> Any:
    dataset = tmp_path / f"{name}.jsonl"
    dataset.write_text("".join(json.dumps({"ticket": f"ticket {i}"}) + "\n" for i in range(3)))
    return parse_spec(
        {
            "name": name,
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "v",
                    "messages": [{"role": "user", "content": "Triage as JSON: {{ ticket }}"}],
                    "model": "quick:fast",
                    "params": {"max_tokens": 200},
                    "output_schema": {
                        "type": "object",
                        "properties": {"summary": {"type": "string"}},
                    },
                    "rules": rules,
                }
            ],
            "limits": {"quick": {"rpm": 600_000, "concurrency": 8}},
        }
    )


def test_a_hostile_rule_spec_leaves_a_benign_run_in_the_same_process_completing(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    providers = tmp_path / "providers.yaml"
    providers.write_text("endpoints:\n  quick: {kind: sim, latency_scale: 0}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    # Every summary of the simulated model is long prose that does not end in XYZ.
    hostile = _spec(
        tmp_path,
        "hostile",
        [
            {"name": "p", "field": "summary", "pattern": EVIL_RULE_PATTERN},
            {"name": "m", "expr": f"matches(summary, '{EVIL_RULE_PATTERN}')"},
        ],
    )
    benign = _spec(tmp_path, "benign", [{"name": "has text", "expr": "size(summary) > 0"}])
    with Workbench.open() as wb:
        hostile_id = wb.runs.start(hostile)
        benign_id = wb.runs.start(benign)
        assert wb.runs.wait(benign_id, timeout=60).status == "completed"
        assert wb.runs.wait(hostile_id, timeout=60).status == "completed"
    with Store(db_path) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT run_id = ?, status, rule_status FROM results ORDER BY 1, seq", [hostile_id]
        ).fetchall()
    assert rows == [(False, "succeeded", "passed")] * 3 + [(True, "succeeded", "failed")] * 3
