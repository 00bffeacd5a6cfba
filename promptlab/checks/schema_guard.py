"""JSON Schemas a user wrote (output schemas, variable schemas, `validate --schema`):
checked when saved, then validated with no network and no backtracking regex.

A schema arrives from a pasted spec or a shared prompt, so it is hostile:

- **References stay inside the document.** jsonschema fetches a remote `$ref` over
  HTTP when nothing stops it (a spec's schema could make the app GET any URL). Every
  `$ref` and `$dynamicRef` must be a fragment (`#/$defs/item`, `#anchor`), which
  resolves inside the schema itself (an embedded `$id` names a part of the same
  document); anything else is refused with the reference's path. Validators are also
  built on a registry that refuses to retrieve anything, so a schema stored before this
  check cannot reach the network either.
- **Patterns run on RE2** (`promptlab.checks.patterns`): `pattern` and `patternProperties`
  (also where `additionalProperties` consults them) are matched in linear time, and a
  pattern RE2 cannot run is refused with its path. jsonschema's `unevaluatedProperties`
  matches `patternProperties` with Python's `re`, so a schema may not use both.

jsonschema and referencing are imported by the first schema checked or validator built
(~0.15 s of start-up that a process sending prepared requests never needs).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

from promptlab.checks.patterns import PatternError, compile_pattern
from promptlab.checks.schema_messages import json_path
from promptlab.errors import TemplateError

__all__ = ["check_schema", "has_patterns", "refuse_retrieval", "safe_validator"]

#: Keywords whose values are data, not schemas: a `$ref` or `pattern` key inside an
#: `enum` value or an example is just data and is not looked at.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef")
#: Keywords whose values map names to schemas.
_NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def refuse_retrieval(uri: str) -> Any:
    """The validators' retriever: every URI outside the document is refused, never fetched."""
    import referencing.exceptions

    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and not compile_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = compile_pattern(pattern)
        for key, value in instance.items():
            if compiled.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[Any]:
    from jsonschema import ValidationError

    # jsonschema's own joins the patternProperties into one `re` pattern.
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = [compile_pattern(p) for p in schema.get("patternProperties", {})]
    extras = sorted(
        (k for k in instance if k not in properties and not any(p.search(k) for p in patterns)),
        key=str,
    )
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        joined = ", ".join(repr(extra) for extra in extras)
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({joined} {verb} unexpected)"
            )


@functools.cache
def _safe_validator_class() -> tuple[Any, Any]:
    """The Draft 2020-12 validator class matching with RE2, and the registry it resolves
    in, built once (by the first validator asked for)."""
    import jsonschema
    import referencing

    validator_class = jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
    # Draft 2020-12's own metaschemas are bundled with jsonschema; nothing else resolves.
    registry: referencing.Registry[Any] = referencing.Registry(retrieve=refuse_retrieval)  # type: ignore[call-arg]
    return validator_class, registry


def safe_validator(schema: Mapping[str, Any] | bool) -> Any:
    """A Draft 2020-12 validator of `schema` that never fetches and matches with RE2."""
    validator_class, registry = _safe_validator_class()
    return validator_class(schema if isinstance(schema, bool) else dict(schema), registry=registry)


def check_schema(schema: Mapping[str, Any], root: str = "output_schema") -> dict[str, Any]:
    """`schema` as a plain dict if it is a valid Draft 2020-12 schema whose references stay
    inside it and whose patterns RE2 runs; else TemplateError naming the path inside it
    (`output_schema.properties.price.minimum: ...`)."""
    import jsonschema

    try:
        # No format checker: it would compile each `pattern` with Python's `re` (RE2
        # checks them below).
        jsonschema.Draft202012Validator.check_schema(schema, format_checker=None)
    except jsonschema.SchemaError as exc:
        raise TemplateError(f"{_path(root, exc.absolute_path)}: {exc.message}") from exc
    _check_references_and_patterns(schema, root)
    return dict(schema)


def has_patterns(schema: Any) -> bool:
    """Whether a regex keyword appears anywhere in `schema`."""
    return any(key in ("pattern", "patternProperties") for _, key, _ in _keywords(schema))


def _check_references_and_patterns(schema: Mapping[str, Any], root: str) -> None:
    uses_pattern_properties = uses_unevaluated = None
    for path, key, value in _keywords(schema):
        where = _path(root, [*path, key])
        if key in _REFERENCE_KEYWORDS and isinstance(value, str) and not value.startswith("#"):
            raise TemplateError(
                f"{where}: {value!r} refers outside the schema; only references inside it "
                "(`#/$defs/name`, `#anchor`) are allowed, and nothing is fetched"
            )
        if key == "pattern" and isinstance(value, str):
            _check_pattern(value, where)
        if key == "patternProperties" and isinstance(value, Mapping):
            uses_pattern_properties = uses_pattern_properties or where
            for pattern in value:
                _check_pattern(pattern, _path(root, [*path, key, pattern]))
        if key == "unevaluatedProperties":
            uses_unevaluated = uses_unevaluated or where
    if uses_pattern_properties and uses_unevaluated:
        raise TemplateError(
            f"{uses_unevaluated}: unevaluatedProperties cannot be combined with "
            f"patternProperties ({uses_pattern_properties}); use additionalProperties"
        )


def _check_pattern(pattern: str, where: str) -> None:
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        raise TemplateError(f"{where}: {exc}") from exc


def _keywords(schema: Any) -> Iterator[tuple[list[str | int], str, Any]]:
    """(path to the schema object, keyword, value) for every keyword of every schema object
    inside `schema`, depth first. Data keywords (enum, const, default, examples) are not
    entered, and the names of `properties` or `$defs` are names, not keywords."""
    stack: list[tuple[list[str | int], Any]] = [([], schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, list):
            stack.extend(([*path, i], item) for i, item in enumerate(node))
            continue
        if not isinstance(node, Mapping):
            continue
        for key, value in node.items():
            yield path, str(key), value
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAMED_SCHEMAS and isinstance(value, Mapping):
                stack.extend(([*path, key, str(name)], sub) for name, sub in value.items())
            else:
                stack.append(([*path, str(key)], value))


def _path(root: str, parts: Any) -> str:
    return json_path(parts).replace("$", root, 1)
