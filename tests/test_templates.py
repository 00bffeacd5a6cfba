from __future__ import annotations

from typing import Any

import pytest

from promptlab.errors import (
    RoleOrderError,
    TemplateError,
    TemplateLimitError,
    TemplateSyntaxError,
    UnsafeTemplateError,
    VariableError,
)
from promptlab.prompts.templates import Template, coerce_text_values


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
        # loops keep every feature while their iterations are counted
        (
            "{% for x in xs if x %}{{ loop.index }}/{{ loop.length }}{% if loop.last %}!"
            "{% endif %} {% endfor %}",
            {"xs": ["a", "", "b"]},
            "1/2 2/2! ",
        ),
        ("{% for x in xs %}{{ x }}{% else %}none{% endfor %}", {"xs": []}, "none"),
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


LONG = "x" * 5000


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"maxLength": 4000}, LONG, "ticket: 5000 characters, at most 4000"),
        ({"minLength": 3}, "ab", "ticket: 2 characters, at least 3"),
        ({"type": "array", "maxItems": 2}, ["a", "b", "c"], "ticket: 3 items, at most 2"),
        ({"type": "array", "minItems": 2}, ["a"], "ticket: 1 item, at least 2"),
        ({"pattern": "^[a-z]+$"}, "A" * 5000, f"ticket: '{'A' * 80}…' does not match"),
        ({"type": "integer"}, LONG, f"ticket: '{'x' * 80}…' is not of type 'integer'"),
        ({"enum": ["a", "b"]}, LONG, f"ticket: '{'x' * 80}…' is not one of ['a', 'b']"),
        ({"type": "integer", "maximum": 9}, 12, "ticket: 12 is greater than the maximum of 9"),
    ],
)
def test_variable_problems_name_the_limit_and_never_echo_a_long_value(
    schema: dict[str, Any], value: Any, expected: str
) -> None:
    template = build("{{ ticket }}", variables={"ticket": schema})
    with pytest.raises(VariableError) as info:
        template.render({"ticket": value})
    message = str(info.value)
    assert message.startswith(expected), message
    assert len(message) < 200, message


def test_a_default_over_its_limit_names_the_limit_without_the_whole_default() -> None:
    with pytest.raises(TemplateError) as info:
        build("{{ ticket }}", variables={"ticket": {"maxLength": 10, "default": LONG}})
    assert str(info.value) == "variables.ticket.default: 5000 characters, at most 10"


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


# ---- limits: memory and stack stay bounded whatever the template (issue 7) ------------

FOUR_NESTED_LOOPS = (
    "{% for a in xs %}{% for b in xs %}{% for c in xs %}{% for d in xs %}"
    "{{ d }}{% endfor %}{% endfor %}{% endfor %}{% endfor %}"
)


@pytest.mark.parametrize(
    ("source", "values", "fragment"),
    [
        # 20**4 = 160,000 iterations of tiny output: the loop budget stops it.
        (FOUR_NESTED_LOOPS, {"xs": list(range(20))}, "100000 loop iterations"),
        # A few iterations of big output: the size budget stops it.
        (
            "{% for a in xs %}{{ big }}{% endfor %}",
            {"xs": list(range(100)), "big": "x" * 20_000},
            "1000000 characters",
        ),
        # Loops over the characters of a string count too: 300 * 400 = 120,000.
        (
            "{% for w in words %}{% for c in w %}.{% endfor %}{% endfor %}",
            {"words": ["y" * 400] * 300},
            "100000 loop iterations",
        ),
    ],
)
def test_render_stops_at_the_limits_naming_limit_and_message(
    source: str, values: dict[str, Any], fragment: str
) -> None:
    template = Template.build(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": source}]
    )
    with pytest.raises(TemplateLimitError) as info:
        template.render(values)
    assert fragment in str(info.value)
    assert "messages[1] (user)" in str(info.value) and "\n" not in str(info.value)


def test_the_loop_budget_is_shared_by_every_message_of_one_render() -> None:
    loops = "{% for a in xs %}{% for b in xs %}.{% endfor %}{% endfor %}"  # 200**2 = 40,000 each
    template = Template.build(
        [
            {"role": "user", "content": loops},
            {"role": "assistant", "content": loops},
            {"role": "user", "content": loops},
        ]
    )
    with pytest.raises(TemplateLimitError, match=r"messages\[2\] \(user\)"):
        template.render({"xs": list(range(200))})
    # Each render starts with a fresh budget: one message's worth renders again and again.
    one = build(loops)
    for _ in range(3):
        assert len(one.render({"xs": list(range(200))})[0]["content"]) == 40_000


def test_a_runaway_render_never_holds_much_memory() -> None:
    """The bomb of the issue (4 loops over 60 items, 95 MB of text) stops early."""
    import tracemalloc

    template = build(FOUR_NESTED_LOOPS)
    tracemalloc.start()
    try:
        with pytest.raises(TemplateLimitError):
            template.render({"xs": list(range(60))})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20


def test_rendering_right_under_the_limits_works() -> None:
    template = build("{% for a in xs %}{{ big }}{% endfor %}")
    out = template.render({"xs": list(range(50)), "big": "x" * 20_000})
    assert len(out[0]["content"]) == 1_000_000


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{% if a %}" * 5000 + "x" + "{% endif %}" * 5000, "nested more than 40 levels"),
        ("{% if a %}" * 60 + "x" + "{% endif %}" * 60, "nested more than 40 levels"),
        ("{{ " + "(" * 5000 + "a" + ")" * 5000 + " }}", "nested more than 40 levels"),
        ("{{ " + " and ".join(["a"] * 1000) + " }}", "nested more than 40 levels"),
        ("{{ a" + "|upper" * 1000 + " }}", "nested more than 40 levels"),
        (
            "".join(f"{{% for x{i} in a %}}" for i in range(21)) + "x" + "{% endfor %}" * 21,
            "more than 8 nested loops",
        ),
    ],
)
def test_deeply_nested_templates_are_refused_in_one_line(source: str, fragment: str) -> None:
    with pytest.raises(TemplateLimitError) as info:
        build(source)
    assert fragment in str(info.value)
    assert str(info.value).startswith("messages[0] (user)") and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("messages", "variables", "fragment"),
    [
        (
            [user("x" * 200_001)],
            None,
            "messages[0] (user): 200001 characters, more than the 200000 allowed in a message",
        ),
        (
            [user("a" * 190_000), {"role": "assistant", "content": "b" * 190_000}] * 3
            + [user("c")],
            None,
            "more than the 1000000 allowed in a template",
        ),
        (
            [user("{{ v }}")],
            {"v": {"description": "d" * 1_000_001}},
            "more than the 1000000 allowed in a template",
        ),
    ],
)
def test_templates_too_big_to_save_are_refused(
    messages: list[dict[str, str]], variables: dict[str, Any] | None, fragment: str
) -> None:
    with pytest.raises(TemplateLimitError) as info:
        Template.build(messages, variables=variables)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"role": "user", "content": 123}, "messages[0].content: must be a string, got 123"),
        ({"role": 7, "content": "hi"}, "messages[0].role: must be a string, got 7"),
        ({"role": "user", "content": "  "}, "messages[0].content: empty"),
        ({"role": "user"}, "messages[0].content: missing"),
    ],
)
def test_message_fields_say_what_is_wrong(message: dict[str, Any], fragment: str) -> None:
    with pytest.raises(TemplateError) as info:
        Template.build([message])
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("source", "values", "fragment"),
    [
        ('{{ s|replace("", t) }}', {"s": "a" * 2_000, "t": "b" * 2_000}, "filter 'replace'"),
        ("{{ xs|join(t) }}", {"xs": ["a"] * 2_000, "t": "b" * 2_000}, "filter 'join'"),
        ("{{ s|indent(t) }}", {"s": "\n" * 2_000, "t": "b" * 2_000}, "filter 'indent'"),
        ("{{ s|wordwrap(1, true, t) }}", {"s": "a" * 2_000, "t": "b" * 2_000}, "filter 'wordwrap'"),
        ("{{ xs|tojson(9999) }}", {"xs": [[[[[["a"] * 30] * 30]]]]}, "filter 'tojson'"),
    ],
)
def test_filters_that_multiply_their_input_stop_before_building_it(
    source: str, values: dict[str, Any], fragment: str
) -> None:
    """Each would build 4 MB or more in one piece, past the streaming size check."""
    template = build(source, variables=typed(values))
    with pytest.raises(TemplateLimitError) as info:
        template.render(values)
    assert fragment in str(info.value) and "1000000 characters" in str(info.value)


@pytest.mark.parametrize(
    ("source", "values", "expected"),
    [
        ('{{ s|replace("a", "b") }}', {"s": "aXa"}, "bXb"),
        ("{{ xs|join(', ') }}", {"xs": ["a", "b"]}, "a, b"),
        ("{{ s|indent(2, true) }}", {"s": "a\nb"}, "  a\n  b"),
        ("{{ s|wordwrap(3) }}", {"s": "aa bb"}, "aa\nbb"),
        ("{{ x|tojson }}", {"x": {"b": "<", "a": 1}}, '{"a": 1, "b": "\\u003c"}'),
        ("{{ x|tojson(1) }}", {"x": [1]}, "[\n 1\n]"),
    ],
)
def test_bounded_filters_behave_like_jinjas(
    source: str, values: dict[str, Any], expected: str
) -> None:
    assert build(source, variables=typed(values)).render(values)[0]["content"] == expected


def typed(values: dict[str, Any]) -> dict[str, Any]:
    """The variable schema fragments that accept `values`."""
    kinds = {list: "array", dict: "object", str: "string"}
    return {name: {"type": kinds[type(value)]} for name, value in values.items()}


@pytest.mark.parametrize(
    ("source", "values"),
    [
        ("{{ s|center(w) }}", {"s": "a", "w": "wide"}),
        ("{{ s|wordwrap(w) }}", {"s": "a", "w": "wide"}),
        ("{{ s|round(w) }}", {"s": "a", "w": "b"}),
    ],
)
def test_values_of_the_wrong_kind_for_a_filter_are_a_template_error(
    source: str, values: dict[str, Any]
) -> None:
    with pytest.raises(TemplateError, match=r"^messages\[0\] \(user\): "):
        build(source, variables=typed(values)).render(values)


def test_an_optional_message_is_sent_only_when_its_variable_has_a_value() -> None:
    template = Template.build(
        [
            {"role": "system", "content": "{{ system_prompt }}", "when": "system_prompt"},
            {"role": "user", "content": "{{ question }}"},
        ]
    )
    assert "system_prompt" not in template.variables.get("required", [])
    with_system = template.render({"system_prompt": "Be brief.", "question": "Why?"})
    assert [m["role"] for m in with_system] == ["system", "user"]
    for absent in ({}, {"system_prompt": ""}, {"system_prompt": None}):
        rendered = template.render({"question": "Why?", **absent})
        assert rendered == [{"role": "user", "content": "Why?"}]


def test_when_is_kept_in_the_content_and_only_where_set() -> None:
    plain = Template.build([{"role": "user", "content": "{{ q }}"}])
    assert "when" not in plain.canonical()["messages"][0]  # old hashes stay as they were
    optional = Template.build(
        [{"role": "system", "content": "ctx", "when": "ctx"}, {"role": "user", "content": "hi"}]
    )
    again = Template.from_canonical(optional.canonical())
    assert again.messages[0].when == "ctx" and again.content_hash() == optional.content_hash()


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        # Without the optional user turn, two assistant... no: user then user in a row.
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b", "when": "shot"},
                {"role": "user", "content": "c"},
            ],
            "two user messages in a row",
        ),
        ([{"role": "user", "content": "a", "when": "not a name"}], "expected a variable name"),
    ],
)
def test_optional_messages_must_keep_the_role_order_when_left_out(
    messages: list[dict[str, str]], error: str
) -> None:
    with pytest.raises(TemplateError, match=error):
        Template.build(messages)
