"""JSON the simulated model answers with: a value that fits a JSON Schema (the common
keywords), and the broken kinds real models produce (malformed, off the schema)."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from promptlab.providers.simtext import sentence

#: Guards against self-referencing schemas.
MAX_SCHEMA_DEPTH = 6


def instance_for_schema(
    schema: Mapping[str, Any], rng: random.Random, topics: list[str], root: Mapping[str, Any]
) -> Any:
    """A value that validates against `schema` (the common JSON Schema keywords)."""
    return _instance(schema, rng, topics, root, 0)


def _instance(
    schema: Mapping[str, Any],
    rng: random.Random,
    topics: list[str],
    root: Mapping[str, Any],
    depth: int,
) -> Any:
    if "$ref" in schema and depth < MAX_SCHEMA_DEPTH:
        return _instance(_resolve_ref(root, schema["$ref"]), rng, topics, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(list(schema["enum"]))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _instance(rng.choice(list(schema[key])), rng, topics, root, depth + 1)
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part)
        return _instance(merged, rng, topics, root, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return _object(schema, rng, topics, root, depth)
    if kind == "array":
        return _array(schema, rng, topics, root, depth)
    if kind == "integer":
        low, high = _bounds(schema, 0, 100)
        return rng.randint(math.ceil(low), math.floor(high))
    if kind == "number":
        low, high = _bounds(schema, 0.0, 1.0)
        return round(rng.uniform(low, high), 3)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(schema, rng, topics)


def _resolve_ref(root: Mapping[str, Any], ref: str) -> Mapping[str, Any]:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        if not part:
            continue
        node = node.get(part, {}) if isinstance(node, Mapping) else {}
    return node if isinstance(node, Mapping) else {}


def _object(
    schema: Mapping[str, Any],
    rng: random.Random,
    topics: list[str],
    root: Mapping[str, Any],
    depth: int,
) -> dict[str, Any]:
    props: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if depth >= MAX_SCHEMA_DEPTH and name not in required:
            continue
        if name in required or rng.random() < 0.8:
            out[name] = _instance(sub, rng, topics, root, depth + 1)
    return out


def _array(
    schema: Mapping[str, Any],
    rng: random.Random,
    topics: list[str],
    root: Mapping[str, Any],
    depth: int,
) -> list[Any]:
    low = int(schema.get("minItems", 1))
    high = int(schema.get("maxItems", max(low, 3)))
    items = schema.get("items", {"type": "string"})
    if depth >= MAX_SCHEMA_DEPTH:
        high = low
    return [_instance(items, rng, topics, root, depth + 1) for _ in range(rng.randint(low, high))]


def _bounds(schema: Mapping[str, Any], low: float, high: float) -> tuple[float, float]:
    low = schema.get("minimum", schema.get("exclusiveMinimum", low - 1) + 1)
    high = schema.get("maximum", schema.get("exclusiveMaximum", high + 1) - 1)
    return (low, max(low, high))


def _string(schema: Mapping[str, Any], rng: random.Random, topics: list[str]) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "email":
        return f"{rng.choice(topics).replace(' ', '.')}@example.com"
    text = sentence(rng, topics)
    low = int(schema.get("minLength", 0))
    high = int(schema.get("maxLength", 10_000))
    while len(text) < low:
        text += " " + sentence(rng, topics)
    return text[:high]


def break_schema(value: Any, schema: Mapping[str, Any], rng: random.Random) -> Any:
    """Valid JSON that no longer fits: drop a required field or change a field's type."""
    if isinstance(value, dict) and value:
        required = [r for r in schema.get("required", ()) if r in value]
        broken = dict(value)
        if required and rng.random() < 0.5:
            del broken[rng.choice(required)]
        else:
            key = rng.choice(list(broken))
            broken[key] = 42 if isinstance(broken[key], str) else "not-the-right-type"
        return broken
    return {"unexpected": value}


def malform(text: str, rng: random.Random) -> str:
    """Syntactically broken JSON of the kinds real models produce."""
    variant = rng.randrange(4)
    if variant == 0:
        return f"Here is the JSON you asked for:\n```json\n{text}\n```"
    if variant == 1 and text.endswith("}"):
        return text[:-1] + ",}"
    if variant == 2:
        return text.replace('"', "'")
    return text.rstrip("}]")
