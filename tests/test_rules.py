"""Business rules: every kind, safe expressions, errors refused at save with position,
a rule that raises recorded (never raised), and rules through prompt files and runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from promptlab.checks.rules import RuleSet, RuleStatus, parse_rules
from promptlab.errors import PromptlabError, TemplateError
from promptlab.prompts.registry import Registry
from promptlab.prompts.templates import Template
from promptlab.store import Store

ORDER = {
    "total": 3.5,
    "items": [{"sku": "AB-1", "price": 1.5}, {"sku": "CD-2", "price": 2}],
    "summary": "two items",
    "customer": {"tier": "pro", "email": "a@b.c"},
}


def run(rules: list[dict[str, Any]], output: Any = ORDER) -> tuple[RuleStatus, list[str]]:
    status, failed = RuleSet(parse_rules(rules)).check(output)
    return status, [str(f) for f in failed]


@pytest.mark.parametrize(
    "rule",
    [
        {"expr": "total == sum(items.price)"},
        {"expr": "size(summary) <= 280"},
        {"expr": "customer.tier in ['free', 'pro'] and size(items) == 2"},
        {"expr": "all(p > 0 for p in items.price)"},
        {"expr": "matches(items[0].sku, '^[A-Z]+-[0-9]+$')"},
        {"expr": "output.total > 1"},
        {"required": ["total", "customer.email"]},
        {"field": "customer.email", "pattern": "^[^@]+@[^@]+$"},
        {"field": "total", "minimum": 0, "maximum": 100},
        {"field": "customer.tier", "enum": ["free", "pro"]},
    ],
)
def test_each_kind_passes_on_a_good_output(rule: dict[str, Any]) -> None:
    assert run([rule]) == (RuleStatus.PASSED, [])


def test_failures_say_why_and_severity_decides() -> None:
    rules = [
        {"name": "totals add up", "expr": "total == sum(items.price) + 1"},
        {"name": "short", "expr": "size(summary) <= 3", "severity": "warning"},
        {"required": ["total", "shipping.address"]},
        {"field": "total", "maximum": 2},
        {"field": "customer.tier", "enum": ["free"]},
    ]
    status, failed = run(rules)
    assert status is RuleStatus.FAILED
    assert failed == [
        "totals add up: `total == sum(items.price) + 1` is false",
        "short (warning): `size(summary) <= 3` is false",
        "rules[2]: missing shipping.address",
        "rules[3]: total: 3.5 is outside [None, 2]",
        "rules[4]: customer.tier: 'pro' is not one of ['free']",
    ]
    assert run([rules[1]])[0] is RuleStatus.WARNED


def test_a_rule_that_raises_is_recorded_and_the_rest_still_run() -> None:
    status, failed = run(
        [
            {"name": "typo", "expr": "totl > 0"},
            {"name": "divide", "expr": "total / 0 > 1", "severity": "warning"},
            {"name": "fine", "expr": "total > 100"},
        ]
    )
    assert status is RuleStatus.FAILED
    assert failed[0].startswith("typo: rule error: NameNotDefined")
    assert failed[1].startswith("divide (warning): rule error: ZeroDivisionError")
    assert failed[2] == "fine: `total > 100` is false"
    # Not an object at all: rules fail, nothing raises.
    assert run([{"expr": "total > 0"}], output=[1, 2])[0] is RuleStatus.FAILED


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([{"expr": "total =="}], "rules[0]: syntax error at the end (column 9): invalid syntax"),
        (
            [{"name": "paren", "expr": "size(items > 2"}],
            "rules[0] (paren): syntax error at column 5: '(' was never closed",
        ),
        ([{"expr": "__import__('os')"}], "rules[0]: column 1: only these functions"),
        ([{"expr": "open('x').read()"}], "rules[0]: column 1: only these functions"),
        ([{"expr": "items.__class__"}], "rules[0]: column 1: fields may not start with '_'"),
        ([{"expr": "(lambda: 1)()"}], "rules[0]: column 1: only these functions"),
        ([{"expr": "a", "severity": "fatal"}], "rules[0]: severity must be error or warning"),
        ([{"field": "x", "pattern": "("}], "rules[0].pattern: '(' is not a regex RE2 can run"),
        ([{"pattern": "x"}], "rules[0]: pattern needs `field`"),
        ([{"expr": "a", "required": ["a"]}], "rules[0]: give exactly one of"),
        ([{"exp": "a"}], "rules[0]: unknown keys exp"),
        ({"expr": "a"}, "rules: expected a list of rules"),
    ],
)
def test_bad_rules_are_refused_at_save_with_their_position(rules: Any, message: str) -> None:
    with pytest.raises(TemplateError) as err:
        Template.build([{"role": "user", "content": "hi"}], rules=rules)
    assert str(err.value).startswith(message)


def test_rules_are_part_of_the_version_and_bump_major(store: Store, tmp_path: Path) -> None:
    registry = Registry(store)
    messages = [{"role": "user", "content": "Order {{ id }} as JSON"}]
    plain = Template.build(messages)
    assert "rules" not in plain.canonical()  # old content hashes stay as they were
    registry.save_version("orders", plain, author="t")
    ruled = Template.build(messages, rules=[{"expr": "total > 0"}])
    saved = registry.save_version("orders", ruled, author="t")
    assert saved.version.semver == "2.0.0"
    again = registry.resolve("orders")
    assert again.template.rules == ({"expr": "total > 0"},)
    assert again.template.rule_set.check({"total": 1})[0] is RuleStatus.PASSED


def test_expressions_cannot_reach_python() -> None:
    for expr in ("items.count", "summary.upper()", "output.keys()"):
        status, failed = run([{"expr": f"{expr} == 1"}]) if "(" not in expr else (None, [])
        if status is not None:
            assert status is RuleStatus.FAILED and "rule error" in failed[0]
    with pytest.raises(PromptlabError):
        parse_rules([{"expr": "summary.upper()"}])
    assert json.dumps(ORDER)  # the data itself is untouched


RUN_RULES = [
    {"name": "short summary", "expr": "size(summary) <= 40"},
    {"name": "routable", "expr": "category in ['billing', 'bug']", "severity": "warning"},
    {"name": "typo", "expr": "urgency > 0", "severity": "warning"},
]


def test_a_run_records_each_items_rules_and_completion_counts_them(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from promptlab.checks.validation import check_output
    from promptlab.engine import parse_spec
    from promptlab.store import ReadModels
    from promptlab.workbench import Workbench
    from tests.test_engine_checks import MESSAGES, SCHEMA

    providers = tmp_path / "providers.yaml"
    providers.write_text("endpoints:\n  quick: {kind: sim, latency_scale: 0}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    dataset = tmp_path / "tickets.jsonl"
    dataset.write_text("".join(json.dumps({"ticket": f"ticket {i}"}) + "\n" for i in range(60)))
    spec = parse_spec(
        {
            "name": "rules",
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "ruled",
                    "messages": MESSAGES,
                    "model": "quick:balanced",
                    "output_schema": SCHEMA,
                    "rules": RUN_RULES,
                },
            ],
            "limits": {"quick": {"rpm": 600_000, "concurrency": 16}},
        }
    )
    with Workbench.open() as wb:
        run_id = wb.runs.start(spec)
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
    rule_set = RuleSet(parse_rules(RUN_RULES))
    with Store(db_path) as store:
        with store.read() as cur:
            rows = cur.execute(
                "SELECT output_text, finish_reason, check_status, rule_status, rule_errors "
                "FROM results WHERE run_id = ?",
                [run_id],
            ).fetchall()
        summary = ReadModels(store).variant_summaries(run_id)[0]
    completed = 0
    for text, finish, check_status, rule_status, rule_errors in rows:
        check = check_output(text, SCHEMA, finish)
        if check_status in ("valid", "repaired"):
            status, failed = rule_set.check(check.parsed)
            assert rule_status == status.value
            assert json.loads(rule_errors) == [str(f) for f in failed]
            # The typo rule raises on every output: recorded, the run went on.
            assert any(e.startswith("typo (warning): rule error") for e in json.loads(rule_errors))
            completed += status is not RuleStatus.FAILED
        else:
            assert rule_status is None
    statuses = {r[3] for r in rows}
    assert {"failed", "warned"} <= statuses
    assert summary.completed == completed < summary.valid + summary.repaired
    assert summary.rule_failed == sum(r[3] == "failed" for r in rows)
    assert summary.completion_rate == pytest.approx(completed / len(rows))
