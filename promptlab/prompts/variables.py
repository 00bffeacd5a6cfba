"""The variables' JSON Schema: string by default, refined by the author, checked whole."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from promptlab.checks.schema_guard import check_schema, safe_validator
from promptlab.checks.schema_messages import describe
from promptlab.errors import TemplateError

#: JSON Schema types a variable may declare; anything else is a typo worth reporting.
VARIABLE_TYPES = ("string", "integer", "number", "boolean", "array", "object")


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
        if not isinstance(refinements.get(name) or {}, Mapping):
            raise TemplateError(f"variables.{name}: expected a mapping of JSON Schema keywords")
        fragment = dict(refinements.get(name) or {})
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


def optional_when_variables(
    whens: Sequence[str | None], names: list[str], refinements: Mapping[str, Any]
) -> Mapping[str, Any]:
    """Add each `when:` variable to `names`, optional unless the author said otherwise."""
    if not isinstance(refinements, Mapping) or refinements.get("type") == "object":
        return refinements  # a full schema is the author's word; checked as given
    out = dict(refinements)
    for when in whens:
        if when is None:
            continue
        if when not in names:
            names.append(when)
        if when not in out:
            out[when] = {"required": False}
    return out


def problem_variable(error: jsonschema.ValidationError) -> str:
    """The variable a schema error is about, as VariableError names it."""
    if error.path:
        return ".".join(str(p) for p in error.path)
    if error.validator == "required":
        match = re.match(r"'([^']+)' is a required property", error.message)
        if match:
            return match.group(1)
    return "(values)"
