"""Prompt templates: messages with `{{ variable }}` placeholders, checked and rendered safely.

Templates render in Jinja2's sandbox, limited at save time to a small, safe subset of
Jinja (promptlab/prompts/sandbox.py), so a template can never call functions or reach
Python internals. Variable *values* are data: they are inserted as text and never
evaluated, so `{{ 7*7 }}` inside a value stays literal; the variables' JSON Schema is
built in promptlab/prompts/variables.py.

Size and depth are bounded too (promptlab/prompts/limits.py), so no template can
exhaust memory or the stack: saving checks size and nesting, and each render has a
budget of loop iterations and characters, counted while it runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from promptlab.data.jsonl import strict_loads
from promptlab.errors import (
    RoleOrderError,
    TemplateError,
    TemplateLimitError,
    VariableError,
    VariableProblem,
)
from promptlab.prompts.sizes import MAX_MESSAGE_CHARS, MAX_TEMPLATE_CHARS

if TYPE_CHECKING:
    from promptlab.checks.rules import RuleSet

# jinja2 (with the sandbox and the render limits), jsonschema and the rules' evaluator
# (simpleeval, RE2) are imported by the methods that use them: a run that sends prepared
# requests (`promptlab batch`) loads a Template with every version record and never
# builds, renders or checks one, and these cost it over a tenth of a second of start-up.

ROLES = ("system", "user", "assistant")
PARAM_DEFAULTS: dict[str, Any] = {
    "model": "sim:careful",
    "temperature": 0.7,
    "top_p": 1.0,
    "max_tokens": 512,
}


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
    #: The cosine distance from its typical prompt past which a filled prompt drifted
    #: (promptlab/evaluation/drift.py); None: the check's own.
    drift_threshold: float | None = None

    @classmethod
    def build(
        cls,
        messages: Sequence[Mapping[str, Any] | Message],
        params: Mapping[str, Any] | None = None,
        variables: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        rules: Sequence[Mapping[str, Any]] | None = None,
        drift_threshold: float | None = None,
    ) -> Template:
        """Check messages, params and schemas; return a template ready to save."""
        from promptlab.prompts.sandbox import check_safe, find_variables
        from promptlab.prompts.variables import optional_when_variables, variable_schema

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
        names, shapes = find_variables(m.content for m in msgs)
        refinements = optional_when_variables([m.when for m in msgs], names, variables or {})
        template = cls(
            messages=msgs,
            params=normalize_params(params or {}),
            variables=variable_schema(names, shapes, refinements),
            output_schema=_check_output_schema(output_schema),
            rules=_checked_rules(rules),
            drift_threshold=_checked_drift_threshold(drift_threshold),
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
            **({"drift_threshold": self.drift_threshold} if self.drift_threshold else {}),
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
            drift_threshold=content.get("drift_threshold"),
        )

    @functools.cached_property
    def rule_set(self) -> RuleSet:
        """The rules, parsed once, ready to check outputs."""
        from promptlab.checks.rules import RuleSet, parse_rules

        return RuleSet(parse_rules(list(self.rules)))

    @functools.cached_property
    def _validator(self) -> Any:
        # Built once per template: a batch renders the same template for every row.
        from promptlab.checks.schema_guard import safe_validator

        return safe_validator(self.variables)

    def validate_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Values with defaults filled in; raises VariableError listing every problem."""
        from promptlab.checks.schema_messages import describe
        from promptlab.prompts.variables import problem_variable

        props = self.variables.get("properties", {})
        filled = {k: v for k, v in values.items() if k in props}
        for name, schema in props.items():
            if name not in filled and "default" in schema:
                filled[name] = schema["default"]
        problems = [
            VariableProblem(problem_variable(error), describe(error))
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
        import jinja2

        from promptlab.prompts.limits import BUDGET_VARIABLE, RenderBudget
        from promptlab.prompts.sandbox import compiled

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
            compiled_message = compiled(message.content, budget.where)
            chunks = []
            try:
                # Streamed, not rendered whole, so the size is checked before it grows.
                for chunk in compiled_message.generate({**filled, BUDGET_VARIABLE: budget}):
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


def _checked_rules(rules: Sequence[Mapping[str, Any]] | None) -> tuple[dict[str, Any], ...]:
    """The rules as saved; a malformed rule or expression is refused with its position."""
    from promptlab.checks.rules import parse_rules

    parse_rules(rules)
    return tuple(dict(r) for r in rules or ())


def _check_output_schema(schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if schema is None:
        return None
    if not isinstance(schema, Mapping):
        raise TemplateError("output_schema: expected a JSON Schema object")
    from promptlab.checks.schema_guard import check_schema

    # Refused with the path inside the schema: `output_schema.properties.price.minimum`.
    return check_schema(schema)


def _checked_drift_threshold(value: Any) -> float | None:
    """A version's drift threshold: a cosine distance above 0 and at most 2."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 2:
        raise TemplateError(
            f"drift_threshold: a cosine distance above 0 and at most 2, got {value!r}"
        )
    return float(value)
