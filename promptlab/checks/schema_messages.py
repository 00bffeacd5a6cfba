"""Readable messages for JSON Schema errors: name the limit, never echo a long value."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema

#: Longest piece of a value a message repeats: enough to recognise it, short enough
#: that a 5,000-character ticket does not bury the one line that says what is wrong.
SHOWN_VALUE_CHARS = 80

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# validator keyword -> (unit, "at most" or "at least")
_SIZE_LIMITS = {
    "maxLength": ("character", "at most"),
    "minLength": ("character", "at least"),
    "maxItems": ("item", "at most"),
    "minItems": ("item", "at least"),
    "maxProperties": ("property", "at most"),
    "minProperties": ("property", "at least"),
}


def describe(error: jsonschema.ValidationError) -> str:
    """One line about what is wrong with `error.instance`, naming the schema's limit."""
    if error.validator in _SIZE_LIMITS and isinstance(error.instance, str | list | dict):
        unit, bound = _SIZE_LIMITS[str(error.validator)]
        return f"{_count(len(error.instance), unit)}, {bound} {error.validator_value}"
    full = repr(error.instance)
    if len(full) > SHOWN_VALUE_CHARS and full in error.message:
        return error.message.replace(full, shorten(error.instance), 1)
    return error.message


def shorten(value: Any) -> str:
    """`repr(value)`, cut to SHOWN_VALUE_CHARS of content with an ellipsis when longer."""
    if isinstance(value, str) and len(value) > SHOWN_VALUE_CHARS:
        quoted = repr(value[:SHOWN_VALUE_CHARS])
        return f"{quoted[:-1]}…{quoted[-1]}"
    full = repr(value)
    return full if len(full) <= SHOWN_VALUE_CHARS else f"{full[:SHOWN_VALUE_CHARS]}…"


def _count(n: int, unit: str) -> str:
    plural = {"property": "properties"}.get(unit, f"{unit}s")
    return f"{n} {unit if n == 1 else plural}"


def json_path(parts: Iterable[Any]) -> str:
    """`$`, then `.name`, `[index]` or `['odd key']` per step."""
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif isinstance(part, str) and _IDENTIFIER.match(part):
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(str(part), ensure_ascii=False)}]")
    return "".join(out)
