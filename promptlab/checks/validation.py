"""Output checks: find the JSON in a model's output, repair it if it must, validate it.

Pure functions, no store: the engine checks each answer as it is recorded, and
`promptlab validate` checks outputs produced anywhere.

- **Extraction.** Bare JSON, JSON inside prose, inside ```json fences (nested ones
  too): the first complete JSON object or array in the text is the output.
- **Repair.** When no strict parse exists, json-repair mends it (trailing commas, single
  quotes, comments, unquoted keys, Python's True/None, a cut-off end). A repaired output
  that fits the schema is `repaired`, counted apart from `valid`.
- **Truncation.** An output whose finish reason is `length` is `truncated`, whatever
  it parses to: a cut-off answer is never silently accepted. So is one whose only flaw
  is an end left open (an unterminated string, brackets never closed), whatever the
  finish reason says: closing it is not a repair, the answer was cut off.
- **Not JSON.** `NaN`, `Infinity` and `-Infinity` (which Python writes) are not JSON: an
  output holding one is `invalid`, naming it, rather than read as a number.
- **Validation** against the schema (JSON Schema Draft 2020-12) reports every error by
  its JSONPath (`$.items[2].price: -1 is less than the minimum of 0`). Validators are
  compiled once per schema (cached by the schema's canonical hash).

Nothing here raises on arbitrary text: whatever comes back, the answer is an OutputCheck.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import jsonschema
import jsonschema_rs
import orjson
from json_repair import repair_json

from promptlab.checks.schema_guard import (
    check_schema,
    has_patterns,
    refuse_retrieval,
    safe_validator,
)
from promptlab.checks.schema_messages import json_path
from promptlab.errors import TemplateError

__all__ = [
    "CheckStatus",
    "Checker",
    "OutputCheck",
    "check_output",
    "check_schema",
    "checker_for",
    "extract_json",
    "json_path",
    "schema_hash",
]

#: Longest output checked; a longer one is invalid (no model answer is this long, and
#: repair is not linear on pathological text).
MAX_CHECK_CHARS = 2_000_000
#: Openings (`{` / `[`) tried when looking for JSON inside prose: enough for any answer
#: with a few brackets in its preamble, bounded so long prose stays cheap.
MAX_OPENINGS = 32
#: Errors kept per output: a list of 10,000 wrong items is not 10,000 useful lines.
MAX_ERRORS = 50

TRUNCATED_MESSAGE = "cut off at the token limit (finish_reason length)"
NO_JSON_MESSAGE = "no JSON object or array found in the output"
CUT_OFF_MESSAGE = "cut off: the output ends inside a string or with brackets left open"

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?")


# Not a PromptlabError: an internal signal, turned into an `invalid` check in this module.
class _NotJsonConstant(ValueError):
    """The text holds NaN, Infinity or -Infinity where JSON has only finite numbers."""


def _refuse_constant(name: str) -> Any:
    raise _NotJsonConstant(name)


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


class CheckStatus(StrEnum):
    """What an output's check found; the text stored in `results.check_status`."""

    VALID = "valid"
    #: Did not parse as written; json-repair mended it, and the result fits the schema.
    REPAIRED = "repaired"
    INVALID = "invalid"
    #: Cut off at the token limit (finish_reason `length`), whatever it parses to.
    TRUNCATED = "truncated"
    #: The template has no output schema: nothing to check against.
    NO_SCHEMA = "no_schema"

    @property
    def completes(self) -> bool:
        """Whether an item with this status counts towards completion."""
        return self in (CheckStatus.VALID, CheckStatus.REPAIRED, CheckStatus.NO_SCHEMA)


@dataclass(frozen=True)
class OutputCheck:
    status: CheckStatus
    #: Every problem as `PATH: message`, the path in JSONPath (`$.items[2].price`).
    errors: tuple[str, ...] = ()
    #: The JSON value found (after repair), None when there was none.
    parsed: Any = None


def schema_hash(schema: Mapping[str, Any]) -> str:
    """The schema's canonical hash: equal schemas share one compiled validator."""
    blob = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class Checker:
    """One schema's compiled validator; `check` an output against it."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        #: Why the schema cannot be used (a reference outside it, a pattern RE2 cannot
        #: run), for a schema stored before such schemas were refused when saved: every
        #: output is then invalid with this reason, and nothing is fetched or backtracked.
        self.refused: str | None = None
        try:
            check_schema(schema, root="output_schema")
        except TemplateError as exc:
            self.refused = str(exc)
        self._validator = safe_validator(schema)
        # jsonschema-rs answers "valid?" ~20x faster; jsonschema, the reference, lists
        # the errors of the (few) invalid outputs, with the messages used everywhere else.
        # Patterns are left to jsonschema on RE2 alone, so one regex engine decides.
        self._fast: Any = None
        if self.refused is None and not has_patterns(schema):
            try:
                self._fast = jsonschema_rs.Draft202012Validator(
                    dict(schema), retriever=refuse_retrieval
                )
            except Exception:  # noqa: BLE001 - a schema it cannot compile: jsonschema alone
                self._fast = None

    def errors(self, value: Any) -> tuple[str, ...]:
        """Every way `value` breaks the schema, as `PATH: message`, sorted."""
        if self.refused is not None:
            return (f"$: the output schema cannot be used: {self.refused}",)
        if self._fast is not None:
            try:
                if self._fast.is_valid(value):
                    return ()
            except Exception:  # noqa: BLE001 - e.g. a number too large for it: ask jsonschema
                pass
        # Sorted by path, then message: the same output always lists its errors alike.
        found = sorted(_describe(error) for error in self._validator.iter_errors(value))
        return tuple(f"{path}: {message}" for path, message in found[:MAX_ERRORS])

    def check(self, text: str | None, finish_reason: str | None = None) -> OutputCheck:
        """Extract, repair if needed, validate; never raises on any text."""
        truncated = str(finish_reason or "").lower() == "length"
        if text is None:
            text = ""
        if len(text) > MAX_CHECK_CHARS:
            return OutputCheck(
                CheckStatus.INVALID,
                (f"$: {len(text)} characters, more than the {MAX_CHECK_CHARS} checked",),
            )
        try:
            found, repaired = _extract(text)
        except _NotJsonConstant as exc:
            message = f"$: {exc} is not JSON (numbers must be finite)"
            if truncated:
                return OutputCheck(CheckStatus.TRUNCATED, (f"$: {TRUNCATED_MESSAGE}", message))
            return OutputCheck(CheckStatus.INVALID, (message,))
        except _NoJSON:
            if truncated:
                return OutputCheck(
                    CheckStatus.TRUNCATED, (f"$: {TRUNCATED_MESSAGE}", f"$: {NO_JSON_MESSAGE}")
                )
            return OutputCheck(CheckStatus.INVALID, (f"$: {NO_JSON_MESSAGE}",))
        errors: tuple[str, ...]
        try:
            errors = self.errors(found)
        except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable $ref, met only here
            errors = (f"$: the schema cannot be applied: {exc}",)
        if truncated or repaired is _CUT_OFF:
            why = TRUNCATED_MESSAGE if truncated else CUT_OFF_MESSAGE
            return OutputCheck(CheckStatus.TRUNCATED, (f"$: {why}", *errors), found)
        if errors:
            return OutputCheck(CheckStatus.INVALID, errors, found)
        return OutputCheck(CheckStatus.REPAIRED if repaired else CheckStatus.VALID, (), found)


#: Compiled checkers by schema hash; a process sees few distinct schemas.
_CHECKERS: dict[str, Checker] = {}
MAX_CACHED_SCHEMAS = 256


def checker_for(schema: Mapping[str, Any]) -> Checker:
    """The compiled checker of `schema`, built once per distinct schema (by its hash)."""
    digest = schema_hash(schema)
    checker = _CHECKERS.get(digest)
    if checker is None:
        if len(_CHECKERS) >= MAX_CACHED_SCHEMAS:
            _CHECKERS.pop(next(iter(_CHECKERS)))  # the oldest
        checker = _CHECKERS[digest] = Checker(schema)
    return checker


def check_output(
    text: str | None, schema: Mapping[str, Any] | None, finish_reason: str | None = None
) -> OutputCheck:
    """Check one output against `schema`; `no_schema` when there is none."""
    if schema is None:
        return OutputCheck(CheckStatus.NO_SCHEMA)
    return checker_for(schema).check(text, finish_reason)


# ---- extraction and repair -------------------------------------------------------------


# Not a PromptlabError: an internal signal, turned into a check status in this module.
class _NoJSON(Exception):
    """Nothing in the text is JSON, even after repair."""


def extract_json(text: str) -> tuple[Any, bool]:
    """The JSON value in `text` and whether it had to be repaired (or closed: cut off).

    Raises _NoJSON (internal) when there is none; `Checker.check` turns that into an
    `invalid` result.
    """
    value, how = _extract(text)
    return value, how is not None


#: How an output's JSON was found when it did not parse as written.
_REPAIRED = "repaired"
_CUT_OFF = "cut off"


def _extract(text: str) -> tuple[Any, str | None]:
    """The JSON value in `text`, and None (as written), _REPAIRED or _CUT_OFF (only its
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
    except _NotJsonConstant:
        raise
    except (ValueError, RecursionError):  # deep nesting: no answer is this deep
        pass
    for start, _end, _closed_span in _spans(text)[:MAX_OPENINGS]:
        try:
            value, _at = _DECODER.raw_decode(text, start)
        except _NotJsonConstant:
            raise
        except ValueError:
            continue
        except RecursionError:
            return _MISSING
        if isinstance(value, dict | list):
            return value
    return _MISSING


def _spans(text: str) -> list[tuple[int, int, bool]]:
    """Top-level bracketed regions: (start, end, closed); an unclosed one runs to the end.

    String-aware for double quotes, so brackets inside JSON strings do not count.
    """
    spans: list[tuple[int, int, bool]] = []
    depth = 0
    opened = 0
    in_string = False
    escaped_at = -1
    for match in _SIGNIFICANT.finditer(text):
        i, char = match.start(), match.group()
        if in_string:
            if char == "\\" and escaped_at != i:
                escaped_at = i + 1
            elif char == '"' and escaped_at != i:
                in_string = False
        elif char == '"':
            in_string = depth > 0  # quotes in prose do not open strings
        elif char in _CLOSER:
            if depth == 0:
                opened = i
            depth += 1
        elif char in "}]" and depth > 0:
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
        raise _NoJSON
    start, end, _closed_span = max(spans, key=lambda span: span[1] - span[0])
    return source[start:end]


_SIGNIFICANT = re.compile(r'["\\{}\[\],]')
_CLOSER = {"{": "}", "[": "]"}


def _brackets(source: str) -> tuple[list[tuple[int, str]], bool]:
    """The brackets outside double-quoted strings, with their places, and whether the
    text ends inside a string (string-aware, escapes included; one linear pass)."""
    marks: list[tuple[int, str]] = []
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
            in_string = True
        elif char in "{}[]":
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
            return value, _CUT_OFF  # nothing was wrong but where it stopped
    quick = _strict(_closed(source, scan))
    if isinstance(quick, dict | list):
        return quick, _REPAIRED
    try:
        value = repair_json(source, return_objects=True, skip_json_loads=True)
    except Exception as exc:  # noqa: BLE001 - a library bug must not stop a run
        raise _NoJSON from exc
    if not isinstance(value, dict | list):
        raise _NoJSON
    if value in ({}, []) and not re.fullmatch(r"\s*(\{\s*\}|\[\s*\])\s*", source):
        raise _NoJSON  # repair found nothing to keep: this is not JSON with flaws
    return value, _REPAIRED


# ---- error paths -------------------------------------------------------------------------

_REQUIRED = re.compile(r"^(?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") is a required property$")


def _describe(error: jsonschema.ValidationError) -> tuple[str, str]:
    """(path, message); a missing required field is reported at its own path."""
    path = list(error.absolute_path)
    if error.validator == "required":
        match = _REQUIRED.match(error.message)
        if match:
            name = match.group("name")[1:-1]
            return json_path([*path, name]), "is required but missing"
    message = error.message
    if len(message) > 300:
        message = message[:297] + "..."
    return json_path(path), message
