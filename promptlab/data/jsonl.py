"""Reading JSON Lines the one way promptlab does: objects only, errors that name the line.

Lines come from `promptlab.data.lines` (bounded in length and in all), and each is parsed by
`strict_loads`: JSON as the standard says, nested at most MAX_JSON_DEPTH levels.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from promptlab.data.lines import LineLimits, open_lines
from promptlab.errors import PromptlabError, SpecError

#: The deepest JSON read from a file (objects and arrays, the outermost counting as 1).
#: Python's parser recurses once per level: a line of 20,000 '[' raised RecursionError.
#: No prompt variable or request needs more; YAML files have the same limit.
MAX_JSON_DEPTH = 100

# What can open, close or escape nesting; everything else is skipped in one step.
_STRUCTURE = re.compile(r'[\[\]{}"\\]')


# Not a PromptlabError: a ValueError like json.JSONDecodeError; each caller says it in its
# own error (DatasetError, OutputFileError, ...).
class NotJsonError(ValueError):
    """A text that is JSON only to a lenient parser, or nested too deep; says why."""

    def __init__(self, reason: str, pos: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        #: Where in the text, when known (the opening bracket one level too deep).
        self.pos = pos


def _refuse_constant(name: str) -> Any:
    # Python writes float('nan') as NaN; other parsers (and DuckDB's json()) refuse it.
    raise NotJsonError(f"{name} is not JSON (numbers must be finite)")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999 would read as inf and be written as Infinity
        raise NotJsonError(f"{text[:40]} is too large for a number")
    return number


# One decoder for every line: json.loads with options builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def strict_loads(text: str, *, object_pairs_hook: Callable[..., Any] | None = None) -> Any:
    """`json.loads` for text from outside: NaN, Infinity and numbers too large for a
    float are refused, and so is nesting deeper than MAX_JSON_DEPTH (checked before
    parsing). Raises NotJsonError, or json.JSONDecodeError for broken syntax."""
    deep = _too_deep_at(text)
    if deep is not None:
        raise NotJsonError(f"nested more than {MAX_JSON_DEPTH} levels deep", deep)
    decoder = _DECODER
    if object_pairs_hook is not None:
        decoder = json.JSONDecoder(
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=object_pairs_hook,
        )
    try:
        value = decoder.decode(text)
    except ValueError as exc:
        # Exactly ValueError: the one int() raises past its digit limit (JSONDecodeError
        # and the caller's hook's own subclasses pass through).
        if type(exc) is not ValueError:
            raise
        limit = sys.get_int_max_str_digits()
        raise NotJsonError(f"an integer of more than {limit:,} digits") from exc
    _refuse_lone_surrogates(text, value)
    return value


def numbered_jsonl(
    path: Path,
    limits: LineLimits,
    *,
    label: str = "dataset",
    error: type[PromptlabError] = SpecError,
    shown: str | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each JSON object of a JSON Lines file with its line number; blank lines skipped.

    Errors are `error`s naming the file as `{label} {path}, line N` (`shown` instead of
    the path: an upload's name where it was sent from).
    """
    values = numbered_json_values(path, limits, label=label, error=error, shown=shown)
    for number, value in values:
        if not isinstance(value, dict):
            raise error(f"{label} {shown or path}, line {number}: expected a JSON object")
        yield number, value


def numbered_json_values(
    path: Path,
    limits: LineLimits,
    *,
    label: str = "dataset",
    error: type[PromptlabError] = SpecError,
    shown: str | None = None,
) -> Iterator[tuple[int, Any]]:
    """Each JSON value (any kind) of a JSON Lines file with its line number; blank lines
    skipped. Errors are `error`s naming the file as `{label} {path}, line N` (or `shown`)."""
    where = f"{label} {shown or path}"
    with open_lines(path, where, limits, error) as lines:
        for number, line in lines:
            if not line.strip():
                continue
            try:
                value = strict_loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{where}, line {number}: not valid JSON ({exc.msg})") from exc
            except NotJsonError as exc:
                raise error(f"{where}, line {number}: {exc.reason}") from exc
            yield number, value


def _too_deep_at(text: str) -> int | None:
    """Where the first bracket nested deeper than MAX_JSON_DEPTH opens; None if none.

    Brackets inside strings are text. Only a text with that many opening brackets in
    all can nest that deep, so most are passed by two counts.
    """
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return None
    depth = 0
    in_string = False
    escaped_at = -1  # the position a backslash escapes
    for match in _STRUCTURE.finditer(text):
        at, char = match.start(), match.group()
        if at == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return at
        elif char in "]}":
            depth -= 1
    return None


def _refuse_lone_surrogates(text: str, value: Any) -> None:
    # JSON may escape half of a UTF-16 pair ("\ud800"): not text anyone can store.
    # Only texts with such an escape need the (costly) full check.
    if "\\ud" not in text and "\\uD" not in text:
        return
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NotJsonError(
            f"contains an unpaired surrogate ({exc.object[exc.start : exc.end]!a}), "
            "which is not valid text"
        ) from exc
