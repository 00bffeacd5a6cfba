from __future__ import annotations

from typing import Any

import pytest

from promptlab.errors import (
    RoleOrderError,
    TemplateError,
    TemplateSyntaxError,
    UnsafeTemplateError,
    VariableError,
)
from promptlab.templates import Template, coerce_text_values


def user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def build(*contents: str, **kwargs: Any) -> Template:
    return Template.build([user(c) for c in contents], **kwargs)


@pytest.mark.parametrize(
    ("source", "values", "expected"),
    [
        ("Hello {{ name }}", {"name": "Ada"}, "Hello Ada"),
        # JSON in prompt text renders untouched
        ('Answer like {"a": {"b": [1, 2]}}', {}, 'Answer like {"a": {"b": [1, 2]}}'),
        ('{"x": "{{ v }}"}', {"v": "1"}, '{"x": "1"}'),
        ("#tag {#1} and {# not a comment #}", {}, "#tag {#1} and {# not a comment #}"),
        ("{% raw %}{{ literal }}{% endraw %}", {}, "{{ literal }}"),
        # values are data, never evaluated
        ("{{ v }}", {"v": "{{ 7*7 }}"}, "{{ 7*7 }}"),
        ("{{ v }}", {"v": "{{ x.__class__ }}"}, "{{ x.__class__ }}"),
        ("{{ v }}", {"v": "{% for x in y %}"}, "{% for x in y %}"),
        ("{% for i in items %}- {{ i.name }}\n{% endfor %}", {"items": [{"name": "a"}]}, "- a\n"),
        ("{{ name | upper }}", {"name": "ada"}, "ADA"),
        ("{% if vip %}VIP {% endif %}{{ name }}", {"vip": "yes", "name": "x"}, "VIP x"),
    ],
)
def test_render(source: str, values: dict[str, Any], expected: str) -> None:
    assert build(source).render(values)[-1]["content"] == expected


@pytest.mark.parametrize(
    ("source", "error", "fragment"),
    [
        ("{{ ''.__class__.__mro__ }}", UnsafeTemplateError, "'_' reach Python internals"),
        ("{{ x.__class__ }}", UnsafeTemplateError, "__class__"),
        ("{{ cycler.__init__.__globals__ }}", UnsafeTemplateError, "not allowed"),
        ("{{ x['__class__'] }}", UnsafeTemplateError, "constant keys"),
        ("{{ x[y] }}", UnsafeTemplateError, "constant keys"),
        ("{{ lipsum() }}", UnsafeTemplateError, "calls are not allowed"),
        ("{{ x.items() }}", UnsafeTemplateError, "calls are not allowed"),
        ("{{ x|attr('y') }}", UnsafeTemplateError, "filter 'attr'"),
        ("{{ 7*7 }}", UnsafeTemplateError, "arithmetic"),
        ('{{ {"a": 1} }}', UnsafeTemplateError, "raw"),
        ("{% set x = 1 %}", UnsafeTemplateError, "{% set %}"),
        ("{% include 'a' %}", UnsafeTemplateError, "{% include %}"),
        ("{% macro m() %}{% endmacro %}", UnsafeTemplateError, "macro"),
        ("{{ _secret }}", UnsafeTemplateError, "may not start with '_'"),
        ("line 1\n{{ name ", TemplateSyntaxError, "line 2"),
        ("{{ x|join(',', '__class__') }}", UnsafeTemplateError, "look up attributes"),
        ("{{ x|sort(false, false, '__class__') }}", UnsafeTemplateError, "look up attributes"),
        ("{{ x|unique(attribute='a') }}", UnsafeTemplateError, "look up attributes"),
        ("{{ x|center(2000000000) }}", UnsafeTemplateError, "larger than 10000"),
        ("{{ x|indent(width=99999) }}", UnsafeTemplateError, "larger than 10000"),
        ("{{ self }}", UnsafeTemplateError, "'self' is reserved"),
    ],
)
def test_unsafe_or_broken_templates_are_refused(
    source: str, error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error) as info:
        build(source)
    assert fragment in str(info.value)
    assert "messages[0]" in str(info.value)


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([], "at least one message"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], "messages[1]"),
        (
            [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}],
            "messages[1]",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
            "two user messages in a row",
        ),
        ([{"role": "system", "content": "a"}], "first message after the system prompt"),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
            "must end with a user message",
        ),
        (
            [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
            "first message",
        ),
        ([{"role": "robot", "content": "a"}], "role 'robot'"),
    ],
)
def test_role_order(messages: list[dict[str, str]], fragment: str) -> None:
    with pytest.raises(RoleOrderError) as info:
        Template.build(messages)
    assert fragment in str(info.value)


def test_valid_multi_turn_conversation() -> None:
    template = Template.build(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "{{ q1 }}"},
            {"role": "assistant", "content": "{{ a1 }}"},
            {"role": "user", "content": "{{ q2 }}"},
        ]
    )
    assert template.variable_names == ["q1", "a1", "q2"]


def test_variables_extracted_with_guessed_types_and_refinements() -> None:
    template = build(
        "{{ title }} {% for f in features %}{{ f }}{% endfor %} {{ user.name }} {{ n }}",
        variables={"n": {"type": "integer", "minimum": 1}, "title": {"required": False}},
    )
    props = template.variables["properties"]
    assert props["title"] == {"type": "string"}
    assert props["features"]["type"] == "array"
    assert props["user"]["type"] == "object"
    assert props["n"] == {"minimum": 1, "type": "integer"}
    assert template.variables["required"] == ["features", "user", "n"]
    assert "f" not in props  # loop variables are not inputs


@pytest.mark.parametrize(
    ("values", "expected_problems"),
    [
        ({}, {"name", "count"}),
        ({"name": "x", "count": "three"}, {"count"}),
        ({"name": "x" * 11, "count": 0, "tier": "gold"}, {"name", "count", "tier"}),
        ({"name": 5, "count": 1}, {"name"}),
    ],
)
def test_every_variable_problem_reported_at_once(
    values: dict[str, Any], expected_problems: set[str]
) -> None:
    template = build(
        "{{ name }} {{ count }} {{ tier }}",
        variables={
            "name": {"maxLength": 10},
            "count": {"type": "integer", "minimum": 1},
            "tier": {"enum": ["free", "pro"], "default": "free"},
        },
    )
    with pytest.raises(VariableError) as info:
        template.render(values)
    assert {p.variable for p in info.value.problems} == expected_problems


def test_defaults_fill_missing_values_and_extras_are_ignored() -> None:
    template = build("{{ tier }}", variables={"tier": {"default": "free"}})
    assert template.render({"unrelated": 1})[0]["content"] == "free"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"params": {"temperature": 3}}, "params.temperature"),
        ({"params": {"max_tokens": 0}}, "params.max_tokens"),
        ({"params": {"model": "gpt-4o"}}, "endpoint:model"),
        ({"params": {"colour": "red"}}, "unknown colour"),
        ({"variables": {"ghost": {}}}, "ghost declared but not used"),
        ({"variables": {"name": {"type": "str"}}}, "variables.name.type"),
        ({"output_schema": {"type": "objekt"}}, "output_schema"),
        ({"variables": ["name"]}, "variables: expected a mapping"),
        ({"params": ["model"]}, "params: expected a mapping"),
        ({"variables": {"name": {"type": "integer", "default": "abc"}}}, "name.default"),
    ],
)
def test_bad_params_and_schemas_name_the_field(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(TemplateError) as info:
        build("{{ name }}", **kwargs)
    assert fragment in str(info.value)


def test_content_hash_is_stable_and_sensitive() -> None:
    a = build("Hello {{ name }}", params={"temperature": 0.5})
    b = build("Hello {{ name }}", params={"temperature": 0.5})
    assert a.content_hash() == b.content_hash()
    # A literal pins the canonical form: a change here silently re-versions every prompt.
    assert a.content_hash() == (
        "sha256:64786b7886373035357da7c4ed365d7f78147981e64efbc7ba6c2ad1fa8ce099"
    )
    assert build("Hello {{ name }}!").content_hash() != a.content_hash()
    assert Template.from_canonical(a.canonical()) == a


def test_coerce_text_values_uses_declared_types() -> None:
    template = build(
        "{{ n }} {{ x }} {{ ok }} {{ items }} {{ s }}",
        variables={
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "ok": {"type": "boolean"},
            "items": {"type": "array"},
        },
    )
    values = coerce_text_values(
        template, {"n": "3", "x": "0.5", "ok": "yes", "items": '["a"]', "s": "7"}
    )
    assert values == {"n": 3, "x": 0.5, "ok": True, "items": ["a"], "s": "7"}
    assert coerce_text_values(template, {"n": "three"}) == {"n": "three"}
