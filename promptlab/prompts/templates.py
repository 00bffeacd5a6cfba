"""Prompt templates: messages with `{{ variable }}` placeholders, checked and rendered safely.

Rendering uses Jinja2's sandbox with StrictUndefined. On top of the sandbox, templates
are limited at save time to a small, safe subset of Jinja (variables, attribute and
item lookups on data, a whitelist of filters, `if` and `for`), so a template can never
call functions or reach Python internals. Variable *values* are data: they are
inserted as text and never evaluated, so `{{ 7*7 }}` inside a value stays literal.

Size and depth are bounded too (template_limits.py), so no template can exhaust memory
or the stack: saving checks size and nesting, and each render has a budget of loop
iterations and characters, counted while it runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2
import jsonschema
from jinja2 import meta, nodes
from jinja2.sandbox import SandboxedEnvironment

from promptlab.checks.rules import RuleSet, parse_rules
from promptlab.checks.schema_guard import check_schema, safe_validator
from promptlab.checks.schema_messages import describe
from promptlab.data.jsonl import strict_loads
from promptlab.errors import (
    RoleOrderError,
    TemplateError,
    TemplateLimitError,
    TemplateSyntaxError,
    UnsafeTemplateError,
    VariableError,
    VariableProblem,
)
from promptlab.prompts.limits import (
    BOUNDED_FILTERS,
    BUDGET_VARIABLE,
    COUNT_LOOP_FILTER,
    MAX_MESSAGE_CHARS,
    MAX_NESTED_LOOPS,
    MAX_TEMPLATE_CHARS,
    MAX_TEMPLATE_DEPTH,
    RenderBudget,
    count_loop_items,
)

ROLES = ("system", "user", "assistant")
PARAM_DEFAULTS: dict[str, Any] = {
    "model": "sim:careful",
    "temperature": 0.7,
    "top_p": 1.0,
    "max_tokens": 512,
}
#: JSON Schema types a variable may declare; anything else is a typo worth reporting.
VARIABLE_TYPES = ("string", "integer", "number", "boolean", "array", "object")

#: Filters that only transform data; none can reach code or the file system.
SAFE_FILTERS = frozenset(
    {
        "abs", "capitalize", "center", "count", "d", "default", "first", "float",
        "indent", "int", "join", "last", "length", "list", "lower", "replace",
        "round", "sort", "string", "title", "tojson", "trim", "truncate", "unique",
        "upper", "wordcount", "wordwrap",
    }
)  # fmt: skip
#: Positional arguments allowed where a later one would be an attribute name to look up
#: (join(sep, attribute), sort(reverse, case_sensitive, attribute), unique(cs, attribute)).
_MAX_POSITIONAL = {"join": 1, "sort": 2, "unique": 1}
#: Largest number a filter may take (widths, lengths): no `center(2000000000)`.
MAX_FILTER_NUMBER = 10_000
#: Names Jinja binds itself; as variables they would render engine internals.
RESERVED_NAMES = frozenset({"self", "varargs", "kwargs", "caller"})
SAFE_TESTS = frozenset(
    {"defined", "undefined", "none", "number", "string", "sequence", "mapping", "in", "eq", "ne"}
)
# Node types allowed anywhere in a template; everything else (calls, literals of dicts
# and lists, arithmetic, macros, imports, includes, set, with) is refused at save time.
_ALLOWED_NODES: tuple[type[nodes.Node], ...] = (
    nodes.Template,
    nodes.Output,
    nodes.TemplateData,
    nodes.Name,
    nodes.Const,
    nodes.Getattr,
    nodes.Getitem,
    nodes.Filter,
    nodes.Test,
    nodes.If,
    nodes.For,
    nodes.CondExpr,
    nodes.And,
    nodes.Or,
    nodes.Not,
    nodes.Compare,
    nodes.Operand,
    nodes.Tuple,
    nodes.Concat,
)


def _environment() -> SandboxedEnvironment:
    env = SandboxedEnvironment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        # `{#` is common in prompt text (markdown, hashtags); make comments need `{##`.
        comment_start_string="{##",
        comment_end_string="##}",
    )
    env.globals.clear()  # no range(), lipsum(), cycler ... : names are variables only
    env.filters.update(BOUNDED_FILTERS)
    env.filters[COUNT_LOOP_FILTER] = count_loop_items
    return env


_ENV = _environment()


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    #: A variable name: the message is sent only when that value is present and not
    #: empty (an optional system prompt, a few-shot turn only some rows have).
    when: str | None = None


@dataclass(frozen=True)
class Template:
    """An ordered list of messages plus default params and optional schemas.

    Build one with `Template.build(...)`, which checks everything a saved template
    must satisfy and fills the variable schema from the placeholders it finds.
    """

    messages: tuple[Message, ...]
    params: Mapping[str, Any] = field(default_factory=lambda: dict(PARAM_DEFAULTS))
    variables: Mapping[str, Any] = field(default_factory=dict)
    output_schema: Mapping[str, Any] | None = None
    #: Business rules over the parsed output, in the author's form (promptlab.checks.rules).
    rules: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def build(
        cls,
        messages: Sequence[Mapping[str, Any] | Message],
        params: Mapping[str, Any] | None = None,
        variables: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        rules: Sequence[Mapping[str, Any]] | None = None,
    ) -> Template:
        """Check messages, params and schemas; return a template ready to save."""
        msgs = tuple(_to_message(m, i) for i, m in enumerate(messages))
        check_role_order(msgs)
        # Optional messages may all be left out: the order must hold then too.
        check_role_order(tuple(m for m in msgs if m.when is None))
        for index, message in enumerate(msgs):
            if len(message.content) > MAX_MESSAGE_CHARS:
                raise TemplateLimitError(
                    f"{_where(index, message)}: {len(message.content)} characters, "
                    f"more than the {MAX_MESSAGE_CHARS} allowed in a message"
                )
            check_safe(message.content, where=_where(index, message))
        names, shapes = _extract(msgs)
        refinements = _optional_when_variables(msgs, names, variables or {})
        template = cls(
            messages=msgs,
            params=normalize_params(params or {}),
            variables=variable_schema(names, shapes, refinements),
            output_schema=_check_output_schema(output_schema),
            rules=_checked_rules(rules),
        )
        size = len(json.dumps(template.canonical(), ensure_ascii=False))
        if size > MAX_TEMPLATE_CHARS:
            raise TemplateLimitError(
                f"template: {size} characters with its schemas, "
                f"more than the {MAX_TEMPLATE_CHARS} allowed in a template"
            )
        return template

    @property
    def variable_names(self) -> list[str]:
        return list(self.variables.get("properties", {}))

    def variable_refinements(self) -> dict[str, Any]:
        """The variables in the author's form (`required: false` per variable), for editing."""
        required = set(self.variables.get("required", []))
        out = {}
        for name, schema in self.variables.get("properties", {}).items():
            fragment = dict(schema)
            if name not in required and "default" not in fragment:
                fragment["required"] = False
            out[name] = fragment
        return out

    def canonical(self) -> dict[str, Any]:
        """Plain JSON-able content; the version id is the hash of this."""
        return {
            # `when` only where set, so templates without it keep their content hash.
            "messages": [
                {"role": m.role, "content": m.content, **({"when": m.when} if m.when else {})}
                for m in self.messages
            ],
            "params": dict(sorted(self.params.items())),
            "variables": self.variables,
            "output_schema": self.output_schema,
            # Only when set, so templates without rules keep their content hash.
            **({"rules": [dict(r) for r in self.rules]} if self.rules else {}),
        }

    def content_hash(self) -> str:
        return content_hash(self.canonical())

    @classmethod
    def from_canonical(cls, content: Mapping[str, Any]) -> Template:
        return cls(
            messages=tuple(
                Message(m["role"], m["content"], m.get("when")) for m in content["messages"]
            ),
            params=dict(content["params"]),
            variables=dict(content["variables"]),
            output_schema=content.get("output_schema"),
            rules=tuple(content.get("rules") or ()),
        )

    @functools.cached_property
    def rule_set(self) -> RuleSet:
        """The rules, parsed once, ready to check outputs."""
        return RuleSet(parse_rules(list(self.rules)))

    @functools.cached_property
    def _validator(self) -> Any:
        # Built once per template: a batch renders the same template for every row.
        return safe_validator(self.variables)

    def validate_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Values with defaults filled in; raises VariableError listing every problem."""
        props = self.variables.get("properties", {})
        filled = {k: v for k, v in values.items() if k in props}
        for name, schema in props.items():
            if name not in filled and "default" in schema:
                filled[name] = schema["default"]
        problems = [
            VariableProblem(_problem_variable(error), describe(error))
            for error in self._validator.iter_errors(filled)
        ]
        if problems:
            raise VariableError(sorted(problems, key=lambda p: p.variable))
        return filled

    def render(self, values: Mapping[str, Any]) -> list[dict[str, str]]:
        """Validate `values`, then render every message; extra values are ignored.

        One budget of loop iterations and characters covers all messages; going past it
        raises TemplateLimitError naming the message being rendered.
        """
        # An empty value of a `when:` variable means "leave the message out", not a value
        # to check against its type (a JSONL null, a blank CSV cell).
        optional = {m.when for m in self.messages if m.when is not None}
        filled = self.validate_values(
            {k: v for k, v in values.items() if not (k in optional and _is_empty(v))}
        )
        budget = RenderBudget()
        rendered = []
        for index, message in enumerate(self.messages):
            if message.when is not None and _is_empty(filled.get(message.when)):
                continue
            budget.where = _where(index, message)
            compiled = _compiled(message.content, budget.where)
            chunks = []
            try:
                # Streamed, not rendered whole, so the size is checked before it grows.
                for chunk in compiled.generate({**filled, BUDGET_VARIABLE: budget}):
                    budget.count_chars(len(chunk))
                    chunks.append(chunk)
            except jinja2.TemplateError as exc:  # e.g. a lookup on a value of the wrong shape
                raise TemplateError(f"{budget.where}: {exc}") from exc
            except (TypeError, ValueError, OverflowError) as exc:  # a filter given the wrong kind
                raise TemplateError(f"{budget.where}: {type(exc).__name__}: {exc}") from exc
            rendered.append({"role": message.role, "content": "".join(chunks)})
        if len(rendered) != len(self.messages):
            sent = tuple(Message(m["role"], m["content"]) for m in rendered)
            check_role_order(sent)  # e.g. an optional turn left two user messages in a row
        return rendered


def content_hash(content: Mapping[str, Any]) -> str:
    """`sha256:` + hex digest of canonical JSON (sorted keys, no whitespace)."""
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


def check_role_order(messages: tuple[Message, ...]) -> None:
    """At most one system message and only first; alternate turns; end on a user turn."""
    if not messages:
        raise RoleOrderError("a template needs at least one message")
    for index, message in enumerate(messages):
        if message.role not in ROLES:
            raise RoleOrderError(
                f"messages[{index}]: role {message.role!r} is not one of {', '.join(ROLES)}"
            )
        if message.role == "system" and index != 0:
            raise RoleOrderError(
                f"messages[{index}]: a system message may only come first (found at {index})"
            )
        if index and message.role == messages[index - 1].role:
            raise RoleOrderError(
                f"messages[{index}]: two {message.role} messages in a row "
                f"(messages[{index - 1}] and messages[{index}]); merge them"
            )
    turns = [m for m in messages if m.role != "system"]
    if not turns or turns[0].role != "user":
        raise RoleOrderError("the first message after the system prompt must be a user message")
    if messages[-1].role != "user":
        raise RoleOrderError(
            f"messages[{len(messages) - 1}]: the conversation must end with a user message, "
            f"not {messages[-1].role}"
        )


def check_safe(source: str, where: str = "template") -> None:
    """Refuse syntax errors, deep nesting and anything outside the safe subset, naming the line."""
    ast = _parse(source, where)
    _check_nesting(ast, where)
    for node in _walk(ast):
        line = getattr(node, "lineno", None)
        at = f"{where}, line {line}" if line else where
        if not isinstance(node, _ALLOWED_NODES):
            raise UnsafeTemplateError(f"{at}: {_describe_forbidden(node)}")
        if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            raise UnsafeTemplateError(
                f"{at}: attribute {node.attr!r} is not allowed "
                "(names starting with '_' reach Python internals)"
            )
        if isinstance(node, nodes.Getitem):
            key = node.arg
            if not isinstance(key, nodes.Const) or (
                isinstance(key.value, str) and key.value.startswith("_")
            ):
                raise UnsafeTemplateError(
                    f"{at}: only constant keys that do not start with '_' may be looked up"
                )
        if isinstance(node, nodes.Name) and node.name.startswith("_"):
            raise UnsafeTemplateError(f"{at}: variable names may not start with '_'")
        if isinstance(node, nodes.Filter) and node.name not in SAFE_FILTERS:
            raise UnsafeTemplateError(
                f"{at}: filter {node.name!r} is not allowed; "
                f"allowed: {', '.join(sorted(SAFE_FILTERS))}"
            )
        if isinstance(node, nodes.Filter):
            _check_filter_arguments(node, at)
        if isinstance(node, nodes.Name) and node.name in RESERVED_NAMES:
            raise UnsafeTemplateError(f"{at}: {node.name!r} is reserved by the template engine")
        if isinstance(node, nodes.Test) and node.name not in SAFE_TESTS:
            raise UnsafeTemplateError(f"{at}: test {node.name!r} is not allowed")
        if isinstance(node, nodes.For) and node.recursive:
            raise UnsafeTemplateError(f"{at}: recursive loops are not allowed")
    _compiled(source, where)  # what is saved must compile (and is cached for rendering)


def _check_filter_arguments(node: nodes.Filter, at: str) -> None:
    """No `attribute=` lookups by name, and no sizes that would blow up memory."""
    if any(kw.key == "attribute" for kw in node.kwargs) or len(node.args) > _MAX_POSITIONAL.get(
        node.name, len(node.args)
    ):
        raise UnsafeTemplateError(
            f"{at}: filter {node.name!r} may not look up attributes by name; "
            "pass the values you need as variables"
        )
    for arg in [*node.args, *(kw.value for kw in node.kwargs)]:
        number = arg.value if isinstance(arg, nodes.Const) else None
        if (
            isinstance(number, int | float)
            and not isinstance(number, bool)
            and abs(number) > MAX_FILTER_NUMBER
        ):
            raise UnsafeTemplateError(
                f"{at}: filter {node.name!r} argument {number} is larger than {MAX_FILTER_NUMBER}"
            )


def normalize_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults filled in and types checked; unknown params are an error."""
    if not isinstance(params, Mapping):
        raise TemplateError(f"params: expected a mapping, got {type(params).__name__}")
    unknown = sorted(set(params) - set(PARAM_DEFAULTS))
    if unknown:
        raise TemplateError(
            f"params: unknown {', '.join(unknown)}; allowed: {', '.join(PARAM_DEFAULTS)}"
        )
    merged = {**PARAM_DEFAULTS, **{k: v for k, v in params.items() if v is not None}}
    model = merged["model"]
    if not isinstance(model, str) or ":" not in model:
        raise TemplateError(
            f"params.model: expected 'endpoint:model' (like sim:careful), got {model!r}"
        )
    out: dict[str, Any] = {"model": model}
    for key, low, high in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        value = merged[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
        ):
            raise TemplateError(
                f"params.{key}: expected a number from {low} to {high}, got {value!r}"
            )
        out[key] = float(value)
    max_tokens = merged["max_tokens"]
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise TemplateError(f"params.max_tokens: expected a positive integer, got {max_tokens!r}")
    out["max_tokens"] = max_tokens
    return out


def variable_schema(
    names: list[str], shapes: Mapping[str, str], refinements: Mapping[str, Any]
) -> dict[str, Any]:
    """JSON Schema for the variables: string by default, refined by the author.

    `refinements` maps a variable to a JSON Schema fragment (type, enum, maxLength,
    default, ...) plus an optional `required: false`. A full object schema
    (`{"type": "object", "properties": ...}`) is accepted too.
    """
    if not isinstance(refinements, Mapping):
        raise TemplateError(
            "variables: expected a mapping of variable name to JSON Schema keywords, "
            f"got {type(refinements).__name__}"
        )
    if refinements.get("type") == "object" and "properties" in refinements:
        required_given = set(refinements.get("required", []))
        refinements = {
            name: {**fragment, "required": name in required_given}
            for name, fragment in refinements["properties"].items()
        }
    unused = sorted(set(refinements) - set(names))
    if unused:
        raise TemplateError(f"variables: {', '.join(unused)} declared but not used in any message")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name in names:
        fragment = dict(refinements.get(name) or {})
        if not isinstance(refinements.get(name, {}), Mapping):
            raise TemplateError(f"variables.{name}: expected a mapping of JSON Schema keywords")
        is_required = fragment.pop("required", True)
        if not isinstance(is_required, bool):
            raise TemplateError(f"variables.{name}.required: expected true or false")
        fragment.setdefault("type", shapes.get(name, "string"))
        if fragment["type"] not in VARIABLE_TYPES:
            raise TemplateError(
                f"variables.{name}.type: {fragment['type']!r} is not one of "
                f"{', '.join(VARIABLE_TYPES)}"
            )
        check_schema(fragment, root=f"variables.{name}")
        if "default" in fragment:
            problem = jsonschema.exceptions.best_match(
                safe_validator(fragment).iter_errors(fragment["default"])
            )
            if problem is not None:
                raise TemplateError(f"variables.{name}.default: {describe(problem)}")
        properties[name] = dict(sorted(fragment.items()))
        if is_required and "default" not in fragment:
            required.append(name)
    return {"type": "object", "properties": properties, "required": required}


def coerce_text_values(template: Template, raw: Mapping[str, str]) -> dict[str, Any]:
    """Turn text (CLI `--var`, CSV cells) into values of each variable's declared type.

    Text that does not parse is passed through unchanged, so validation reports it.
    """
    props = template.variables.get("properties", {})
    out: dict[str, Any] = {}
    for name, text in raw.items():
        kind = props.get(name, {}).get("type", "string")
        out[name] = _coerce(text, kind) if isinstance(text, str) else text
    return out


def _coerce(text: str, kind: str) -> Any:
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
        if kind == "boolean" and text.strip().lower() in {"true", "false", "1", "0", "yes", "no"}:
            return text.strip().lower() in {"true", "1", "yes"}
        if kind in {"array", "object"}:
            return strict_loads(text)  # bounded nesting; a refused text stays text
    except ValueError:
        pass
    return text


def _to_message(item: Mapping[str, Any] | Message, index: int) -> Message:
    if isinstance(item, Message):
        return item
    if not isinstance(item, Mapping):
        raise TemplateError(f"messages[{index}]: expected a mapping with role and content")
    role, content = _text_field(item, "role", index), _text_field(item, "content", index)
    if not content.strip():
        raise TemplateError(f"messages[{index}].content: empty")
    when = item.get("when")
    if when is not None and (not isinstance(when, str) or not _IDENTIFIER.match(when)):
        raise TemplateError(f"messages[{index}].when: expected a variable name, got {when!r:.40}")
    return Message(role.strip().lower(), content, when)


def _optional_when_variables(
    messages: tuple[Message, ...], names: list[str], refinements: Mapping[str, Any]
) -> Mapping[str, Any]:
    """Add each `when:` variable to `names`, optional unless the author said otherwise."""
    if not isinstance(refinements, Mapping) or refinements.get("type") == "object":
        return refinements  # a full schema is the author's word; checked as given
    out = dict(refinements)
    for message in messages:
        if message.when is None:
            continue
        if message.when not in names:
            names.append(message.when)
        if message.when not in out:
            out[message.when] = {"required": False}
    return out


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and not value)


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _text_field(item: Mapping[str, Any], name: str, index: int) -> str:
    value = item.get(name)
    if value is None:
        raise TemplateError(f"messages[{index}].{name}: missing")
    if not isinstance(value, str):
        raise TemplateError(f"messages[{index}].{name}: must be a string, got {value!r:.40}")
    return value


def _where(index: int, message: Message) -> str:
    return f"messages[{index}] ({message.role})"


def _compiled(source: str, where: str) -> jinja2.Template:
    """The compiled template; a template too deep for Python itself is a TemplateLimitError."""
    try:
        return _compile(source)
    except (RecursionError, SyntaxError) as exc:  # CPython's limits, past MAX_TEMPLATE_DEPTH
        raise TemplateLimitError(
            f"{where}: nested too deeply to compile (keep it under {MAX_TEMPLATE_DEPTH} levels)"
        ) from exc


@functools.lru_cache(maxsize=2048)
def _compile(source: str) -> jinja2.Template:
    ast = _ENV.parse(source)
    for node in _walk(ast):
        if isinstance(node, nodes.For):
            # Every loop takes its items through the render's budget (count_loop_items).
            node.iter = nodes.Filter(
                node.iter, COUNT_LOOP_FILTER, [], [], None, None, lineno=node.lineno
            )
    return _ENV.from_string(ast)


def _parse(source: str, where: str) -> nodes.Template:
    try:
        return _ENV.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        hint, text = "", exc.message or ""
        if "expected token" in text or "unexpected" in text:
            hint = " (for literal braces use {% raw %}...{% endraw %})"
        raise TemplateSyntaxError(f"{where}, line {exc.lineno}: {text}{hint}") from exc
    except RecursionError as exc:  # Jinja's parser recurses once per bracket and tag
        raise TemplateLimitError(
            f"{where}: nested more than {MAX_TEMPLATE_DEPTH} levels deep (too deep to parse)"
        ) from exc


def _check_nesting(ast: nodes.Template, where: str) -> None:
    """Refuse templates nested deeper than MAX_TEMPLATE_DEPTH or MAX_NESTED_LOOPS."""
    stack: list[tuple[nodes.Node, int, int]] = [(ast, 0, 0)]
    while stack:
        node, depth, loops = stack.pop()
        line = getattr(node, "lineno", None)
        at = f"{where}, line {line}" if line else where
        if depth > MAX_TEMPLATE_DEPTH:
            raise TemplateLimitError(f"{at}: nested more than {MAX_TEMPLATE_DEPTH} levels deep")
        if loops > MAX_NESTED_LOOPS:
            raise TemplateLimitError(f"{at}: more than {MAX_NESTED_LOOPS} nested loops")
        for child in node.iter_child_nodes():
            stack.append((child, depth + 1, loops + isinstance(child, nodes.For)))


def _walk(node: nodes.Node) -> Iterator[nodes.Node]:
    """Every node, parents before children, in source order; no recursion, so no depth limit."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(current.iter_child_nodes())))


def _describe_forbidden(node: nodes.Node) -> str:
    if isinstance(node, nodes.Call):
        return "function and method calls are not allowed in templates"
    if isinstance(node, nodes.Dict | nodes.List):
        return (
            "dict and list literals are not allowed inside {{ }}; "
            "for literal JSON braces use {% raw %}...{% endraw %}"
        )
    if isinstance(node, nodes.BinExpr | nodes.UnaryExpr):
        return "arithmetic is not allowed in templates; compute values before rendering"
    tag = _FORBIDDEN_TAGS.get(type(node))
    if tag:
        return f"{{% {tag} %}} is not allowed in templates"
    return f"'{type(node).__name__}' is not allowed in templates"


_FORBIDDEN_TAGS: dict[type[nodes.Node], str] = {
    nodes.Assign: "set",
    nodes.AssignBlock: "set",
    nodes.Macro: "macro",
    nodes.CallBlock: "call",
    nodes.Include: "include",
    nodes.Import: "import",
    nodes.FromImport: "from ... import",
    nodes.Extends: "extends",
    nodes.Block: "block",
    nodes.With: "with",
    nodes.FilterBlock: "filter",
}


def _extract(messages: tuple[Message, ...]) -> tuple[list[str], dict[str, str]]:
    """Variables in order of first use, and a guessed JSON type for each."""
    names: list[str] = []
    shapes: dict[str, str] = {}
    for message in messages:
        ast = _ENV.parse(message.content)
        free = meta.find_undeclared_variables(ast)
        for node in _walk(ast):
            if isinstance(node, nodes.Name) and node.name in free and node.name not in names:
                names.append(node.name)
            if isinstance(node, nodes.For) and isinstance(node.iter, nodes.Name):
                shapes.setdefault(node.iter.name, "array")
            if isinstance(node, nodes.Getattr | nodes.Getitem) and isinstance(
                node.node, nodes.Name
            ):
                shapes.setdefault(node.node.name, "object")
    return names, {k: v for k, v in shapes.items() if k in names}


def _problem_variable(error: jsonschema.ValidationError) -> str:
    if error.path:
        return ".".join(str(p) for p in error.path)
    if error.validator == "required":
        match = re.match(r"'([^']+)' is a required property", error.message)
        if match:
            return match.group(1)
    return "(values)"


def _checked_rules(rules: Sequence[Mapping[str, Any]] | None) -> tuple[dict[str, Any], ...]:
    """The rules as saved; a malformed rule or expression is refused with its position."""
    parse_rules(rules)
    return tuple(dict(r) for r in rules or ())


def _check_output_schema(schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        raise TemplateError("output_schema: expected a JSON Schema object")
    # Refused with the path inside the schema: `output_schema.properties.price.minimum`.
    return check_schema(schema)
