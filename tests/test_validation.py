"""Output checks: extraction, repair, truncation and every error by path, on real-world
malformed outputs; nothing raises on arbitrary text; bad schemas refused at save time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promptlab.checks.validation import (
    Checker,
    CheckStatus,
    check_output,
    checker_for,
    json_path,
)
from promptlab.errors import TemplateError
from promptlab.prompts.templates import Template

SCHEMA = {
    "type": "object",
    "required": ["category", "priority"],
    "additionalProperties": False,
    "properties": {
        "category": {"type": "string", "enum": ["bug", "billing", "other"]},
        "priority": {"type": "string", "enum": ["low", "high"]},
        "urgent": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["price"],
                "properties": {"price": {"type": "number", "minimum": 0}},
            },
        },
    },
}
GOOD = {"category": "bug", "priority": "low"}

# (output text, expected status, expected parsed value or None to skip)
CORPUS = [
    ("bare JSON", '{"category": "bug", "priority": "low"}', CheckStatus.VALID, GOOD),
    ("whitespace around", '\n  {"category": "bug", "priority": "low"}\n', CheckStatus.VALID, GOOD),
    (
        "prose around",
        'Sure! Here is the triage: {"category": "bug", "priority": "low"} Let me know.',
        CheckStatus.VALID,
        GOOD,
    ),
    (
        "brackets in the prose before",
        'Here [as asked] the answer: {"category": "bug", "priority": "low"}',
        CheckStatus.VALID,
        GOOD,
    ),
    (
        "json fence",
        'Here is the JSON you asked for:\n```json\n{"category": "bug", "priority": "low"}\n```',
        CheckStatus.VALID,
        GOOD,
    ),
    (
        "bare fence",
        '```\n{"category": "bug", "priority": "low"}\n```\nAnything else?',
        CheckStatus.VALID,
        GOOD,
    ),
    (
        "nested fences",
        '```markdown\nThe answer:\n```json\n{"category": "bug", "priority": "low"}\n```\n```',
        CheckStatus.VALID,
        GOOD,
    ),
    ("trailing comma", '{"category": "bug", "priority": "low",}', CheckStatus.REPAIRED, GOOD),
    ("single quotes", "{'category': 'bug', 'priority': 'low'}", CheckStatus.REPAIRED, GOOD),
    (
        "line comment",
        '{"category": "bug", // what kind\n "priority": "low"}',
        CheckStatus.REPAIRED,
        GOOD,
    ),
    (
        "block comment",
        '{"category": "bug", /* why */ "priority": "low"}',
        CheckStatus.REPAIRED,
        GOOD,
    ),
    ("unquoted keys", '{category: "bug", priority: "low"}', CheckStatus.REPAIRED, GOOD),
    (
        "python literals",
        "{'category': 'bug', 'priority': 'low', 'urgent': True, 'note': None}",
        CheckStatus.REPAIRED,
        {**GOOD, "urgent": True, "note": None},
    ),
    (
        "NaN is not JSON",
        '{"category": "bug", "priority": "low", "score": NaN}',
        CheckStatus.INVALID,
        None,
    ),
    (
        "-Infinity in prose is not JSON either",
        'Here: {"category": "bug", "priority": "low", "score": -Infinity} done',
        CheckStatus.INVALID,
        None,
    ),
    (
        "missing closing brace",
        '{"category": "bug", "priority": "low"',
        CheckStatus.TRUNCATED,
        GOOD,
    ),
    (
        "trailing commas in nested arrays",
        '{"category": "bug", "priority": "low", "items": [{"price": 1,}, {"price": 2},],}',
        CheckStatus.REPAIRED,
        {**GOOD, "items": [{"price": 1}, {"price": 2}]},
    ),
    (
        "cut off inside a string holding brackets and escapes",
        '{"category": "bug", "priority": "low", "note": "a \\"quoted\\" [x,} and',
        CheckStatus.TRUNCATED,
        {**GOOD, "note": 'a "quoted" [x,} and'},
    ),
    (
        "unclosed fence, cut brace",
        'Result:\n```json\n{"category": "bug", "priority": "low"',
        CheckStatus.TRUNCATED,
        GOOD,
    ),
    (
        "cut off mid-string: truncated, with the schema's errors too",
        '{"category": "bug", "priority": "hi',
        CheckStatus.TRUNCATED,
        {"category": "bug", "priority": "hi"},
    ),
    ("refusal in prose", "I'm sorry, I can't help with that.", CheckStatus.INVALID, None),
    ("empty", "", CheckStatus.INVALID, None),
    ("python literal alone", "True", CheckStatus.INVALID, None),
    ("array, not object", "[1, 2, 3]", CheckStatus.INVALID, [1, 2, 3]),
]


@pytest.mark.parametrize(
    ("text", "status", "parsed"),
    [case[1:] for case in CORPUS],
    ids=[case[0] for case in CORPUS],
)
def test_corpus(text: str, status: CheckStatus, parsed: object) -> None:
    check = check_output(text, SCHEMA)
    assert check.status == status, check.errors
    if parsed is not None:
        assert check.parsed == parsed
    assert bool(check.errors) == (status in (CheckStatus.INVALID, CheckStatus.TRUNCATED))


ERRORS = [
    (
        "every error, each by path",
        '{"category": 5, "priority": "low", "items": [{"price": 1}, {"price": 2}, {"price": -1}]}',
        [
            "$.category: 5 is not of type 'string'",
            "$.category: 5 is not one of ['bug', 'billing', 'other']",
            "$.items[2].price: -1 is less than the minimum of 0",
        ],
    ),
    (
        "missing required fields at their own paths",
        '{"items": [{}]}',
        [
            "$.category: is required but missing",
            "$.items[0].price: is required but missing",
            "$.priority: is required but missing",
        ],
    ),
    (
        "wrong types",
        '{"category": "bug", "priority": "low", "urgent": "yes", "items": {"price": 1}}',
        [
            "$.items: {'price': 1} is not of type 'array'",
            "$.urgent: 'yes' is not of type 'boolean'",
        ],
    ),
    (
        "extra field",
        '{"category": "bug", "priority": "low", "mood": "sad"}',
        ["$: Additional properties are not allowed ('mood' was unexpected)"],
    ),
    ("no JSON", "no idea", ["$: no JSON object or array found in the output"]),
]


@pytest.mark.parametrize(("text", "errors"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_every_error_by_path(text: str, errors: list[str]) -> None:
    check = check_output(text, SCHEMA)
    assert check.status is CheckStatus.INVALID
    assert sorted(check.errors) == sorted(errors)


def test_length_finish_is_truncated_even_when_it_parses() -> None:
    check = check_output('{"category": "bug", "priority": "low"}', SCHEMA, "length")
    assert check.status is CheckStatus.TRUNCATED
    assert check.errors == ("$: cut off at the token limit (finish_reason length)",)
    assert check.parsed == GOOD
    cut = check_output('{"category": "bug", "prio', SCHEMA, "length")
    assert cut.status is CheckStatus.TRUNCATED
    assert "$.priority: is required but missing" in cut.errors
    assert not check.status.completes


def test_no_schema_checks_nothing() -> None:
    check = check_output("anything at all", None, "length")
    assert check.status is CheckStatus.NO_SCHEMA
    assert check.status.completes


def test_validators_are_compiled_once_per_schema() -> None:
    same = {k: SCHEMA[k] for k in reversed(list(SCHEMA))}  # other key order, same schema
    assert checker_for(SCHEMA) is checker_for(same)
    assert checker_for(SCHEMA) is not checker_for({"type": "object"})


def test_json_path_quotes_odd_keys() -> None:
    assert json_path(["items", 2, "price"]) == "$.items[2].price"
    assert json_path(["a key", "ok_1", "1st"]) == '$["a key"].ok_1["1st"]'
    assert json_path([]) == "$"


def test_an_unresolvable_ref_is_an_error_not_a_crash() -> None:
    checker = Checker({"$ref": "#/$defs/missing"})
    check = checker.check("{}")
    assert check.status is CheckStatus.INVALID
    assert check.errors[0].startswith("$: the schema cannot be applied")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.sampled_from([None, "stop", "length"]))
def test_never_raises_on_arbitrary_text(text: str, finish: str | None) -> None:
    check = check_output(text, SCHEMA, finish)
    assert check.status in set(CheckStatus)
    assert all(isinstance(e, str) and e.startswith("$") for e in check.errors)


JSONISH = st.text(alphabet="{}[]\",:'`\n tfnrue0123456789.-/*abcTNjso", max_size=200)


@settings(max_examples=300, deadline=None)
@given(JSONISH)
def test_never_raises_on_json_like_text(text: str) -> None:
    check = check_output(text, SCHEMA)
    assert check.status in (
        CheckStatus.VALID,
        CheckStatus.REPAIRED,
        CheckStatus.INVALID,
        CheckStatus.TRUNCATED,
    )


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "object", "properties": {"p": {"type": "strng"}}},
            "output_schema.properties.p.type: 'strng' is not valid",
        ),
        (
            {"type": "object", "properties": {"price": {"type": "number", "minimum": "0"}}},
            "output_schema.properties.price.minimum: '0' is not of type 'number'",
        ),
        ({"required": "category"}, "output_schema.required: 'category' is not of type 'array'"),
    ],
)
def test_invalid_output_schema_refused_at_save_with_its_path(
    schema: dict[str, object], message: str
) -> None:
    with pytest.raises(TemplateError) as err:
        Template.build([{"role": "user", "content": "hi"}], output_schema=schema)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_number_is_named_not_read(constant: str) -> None:
    check = check_output(f'{{"category": "bug", "priority": "low", "n": {constant}}}', SCHEMA)
    assert check.status is CheckStatus.INVALID
    assert check.errors == (f"$: {constant} is not JSON (numbers must be finite)",)


def test_an_open_end_is_cut_off_whatever_the_finish_reason_but_a_flaw_is_repaired() -> None:
    cut = check_output('{"category": "bug", "priority": "low", "items": [{"price": 1},', SCHEMA)
    assert cut.status is CheckStatus.TRUNCATED
    assert cut.errors[0].startswith("$: cut off: the output ends")
    flawed = check_output('{"category": "bug", "priority": "low", "items": [],}', SCHEMA, "stop")
    assert flawed.status is CheckStatus.REPAIRED
