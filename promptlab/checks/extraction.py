"""Finding the JSON in a model's output: bare, inside prose or ```json fences (nested
ones too), else mended: a cut-off end closed, trailing commas dropped, then json-repair
for the rest. NaN and Infinity are refused, not read as numbers (see validation.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import orjson
from json_repair import repair_json

#: Openings (`{` / `[`) tried when looking for JSON inside prose: enough for any answer
#: with a few brackets in its preamble, bounded so long prose stays cheap.
MAX_OPENINGS = 32

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?")


# Not a PromptlabError: an internal signal, turned into an `invalid` check by the checker.
class NotJsonConstant(ValueError):
    """The text holds NaN, Infinity or -Infinity where JSON has only finite numbers."""


def _refuse_constant(name: str) -> Any:
    raise NotJsonConstant(name)


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


# Not a PromptlabError: an internal signal, turned into a check status by the checker.
class NoJSON(Exception):
    """Nothing in the text is JSON, even after repair."""


def extract_json(text: str) -> tuple[Any, bool]:
    """The JSON value in `text` and whether it had to be repaired (or closed: cut off).

    Raises NoJSON (internal) when there is none; `Checker.check` turns that into an
    `invalid` result.
    """
    value, how = find_json(text)
    return value, how is not None


#: How an output's JSON was found when it did not parse as written.
REPAIRED = "repaired"
CUT_OFF = "cut off"


def find_json(text: str) -> tuple[Any, str | None]:
    """The JSON value in `text`, and None (as written), REPAIRED or CUT_OFF (only its
    open end had to be closed)."""
    stripped = text.strip()
    try:
        return orjson.loads(stripped), None  # the common case: the output is the JSON
    except (orjson.JSONDecodeError, TypeError):
        pass
    for candidate in _candidates(stripped):
        value = _first_json(candidate)
        if value is not _MISSING:
            return value, None
    return _repaired(stripped)


_MISSING = object()


def _candidates(text: str) -> Iterable[str]:
    """Fenced blocks first (innermost last fence first), then the whole text."""
    yield from _fenced_blocks(text)
    yield text


def _fenced_blocks(text: str) -> list[str]:
    """The text between each pair of consecutive fences, and after an unclosed last one."""
    marks = list(_FENCE.finditer(text))
    blocks = [text[a.end() : b.start()] for a, b in zip(marks, marks[1:], strict=False)]
    if marks:
        blocks.append(text[marks[-1].end() :])
    return [b for b in blocks if b.strip()]


def _first_json(text: str) -> Any:
    """The first complete top-level JSON object or array in `text`, or _MISSING.

    Only brackets at depth 0 are tried: an object nested in broken JSON is not the answer.
    """
    stripped = text.strip()
    try:
        return _DECODER.decode(stripped)
    except NotJsonConstant:
        raise
    except (ValueError, RecursionError):  # deep nesting: no answer is this deep
        pass
    for start, _end, _closed_span in _spans(text)[:MAX_OPENINGS]:
        try:
            value, _at = _DECODER.raw_decode(text, start)
        except NotJsonConstant:
            raise
        except ValueError:
            continue
        except RecursionError:
            return _MISSING
        if isinstance(value, dict | list):
            return value
    return _MISSING


def _spans(text: str) -> list[tuple[int, int, bool]]:
    """Top-level bracketed regions: (start, end, closed); an unclosed one runs to the end."""
    spans: list[tuple[int, int, bool]] = []
    depth = 0
    opened = 0
    for i, char in _brackets(text)[0]:
        if char in _CLOSER:
            if depth == 0:
                opened = i
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((opened, i + 1, True))
    if depth > 0:
        spans.append((opened, len(text), False))
    return spans


def _repair_source(text: str) -> str:
    """What to hand json-repair: in the last fence (or the text), the longest top-level
    bracketed region; an unclosed one runs to the end (a cut-off answer)."""
    blocks = _fenced_blocks(text)
    source = blocks[-1] if blocks else text
    spans = _spans(source)
    if not spans:
        raise NoJSON
    start, end, _closed_span = max(spans, key=lambda span: span[1] - span[0])
    return source[start:end]


_SIGNIFICANT = re.compile(r'["\\{}\[\],]')
_CLOSER = {"{": "}", "[": "]"}


def _brackets(source: str) -> tuple[list[tuple[int, str]], bool]:
    """The brackets outside double-quoted strings, with their places, and whether the
    text ends inside a string: the one scan every step here reads (string-aware,
    escapes included; one linear pass). A quote outside every bracket opens no string:
    quotes in prose around the JSON do not hide its brackets."""
    marks: list[tuple[int, str]] = []
    depth = 0
    in_string = False
    escaped_at = -1
    for match in _SIGNIFICANT.finditer(source):
        i, char = match.start(), match.group()
        if in_string:
            if char == "\\" and escaped_at != i:
                escaped_at = i + 1
            elif char == '"' and escaped_at != i:
                in_string = False
        elif char == '"':
            in_string = depth > 0
        elif char in "{}[]":
            depth = depth + 1 if char in _CLOSER else max(0, depth - 1)
            marks.append((i, char))
    return marks, in_string


def _closed(source: str, scan: tuple[list[tuple[int, str]], bool]) -> str:
    """`source` (scanned by `_brackets`) with trailing commas dropped and a cut-off end
    closed.

    The two flaws models make most, mended in one linear pass: json-repair costs ~20x
    more and is kept for everything else (quotes, comments, unquoted keys, literals).
    """
    marks, in_string = scan
    out: list[str] = []
    stack: list[str] = []
    last = 0
    for i, char in marks:
        if char in _CLOSER:
            stack.append(_CLOSER[char])
            continue
        out.append(source[last:i])
        last = i
        _drop_trailing_comma(out)
        if stack:
            stack.pop()
    out.append(source[last:])
    if in_string:
        out.append('"')
    elif stack:
        _drop_trailing_comma(out)
    out.extend(reversed(stack))
    return "".join(out)


def _drop_trailing_comma(out: list[str]) -> None:
    tail = out[-1].rstrip()
    if tail.endswith(","):
        out[-1] = tail[:-1]


def _cut_off_end(source: str, scan: tuple[list[tuple[int, str]], bool]) -> str | None:
    """`source` (scanned by `_brackets`) with only its open end closed (a string, then
    brackets; a comma left dangling at the very end dropped), or None when its end left
    nothing open."""
    marks, in_string = scan
    stack: list[str] = []
    for _i, char in marks:
        if char in _CLOSER:
            stack.append(_CLOSER[char])
        elif stack:
            stack.pop()
    if not stack and not in_string:
        return None
    out = [source + '"'] if in_string else [source]
    _drop_trailing_comma(out)
    return out[0] + "".join(reversed(stack))


def _strict(text: str) -> Any:
    """JSON as written, or _MISSING (NaN and Infinity are not JSON)."""
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError):
        return _MISSING


def _repaired(text: str) -> tuple[Any, str]:
    source = _repair_source(text)
    scan = _brackets(source)
    closed = _cut_off_end(source, scan)
    if closed is not None:
        value = _strict(closed)
        if isinstance(value, dict | list):
            return value, CUT_OFF  # nothing was wrong but where it stopped
    quick = _strict(_closed(source, scan))
    if isinstance(quick, dict | list):
        return quick, REPAIRED
    try:
        value = repair_json(source, return_objects=True, skip_json_loads=True)
    except Exception as exc:  # noqa: BLE001 - a library bug must not stop a run
        raise NoJSON from exc
    if not isinstance(value, dict | list):
        raise NoJSON
    if value in ({}, []) and not re.fullmatch(r"\s*(\{\s*\}|\[\s*\])\s*", source):
        raise NoJSON  # repair found nothing to keep: this is not JSON with flaws
    return value, REPAIRED
