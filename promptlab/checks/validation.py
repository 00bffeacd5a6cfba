"""Output checks: find the JSON in a model's output, repair it if it must, validate it.

Pure functions, no store: the engine checks each answer as it is recorded, and
`promptlab validate` checks outputs produced anywhere. Extraction and repair are in
promptlab/checks/extraction.py.

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
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from promptlab.checks.extraction import CUT_OFF, NoJSON, NotJsonConstant, extract_json, find_json
from promptlab.checks.extraction import MAX_OPENINGS as MAX_OPENINGS
from promptlab.checks.schema_guard import (
    check_schema,
    has_patterns,
    refuse_retrieval,
    safe_validator,
)
from promptlab.checks.schema_messages import json_path
from promptlab.errors import TemplateError

if TYPE_CHECKING:
    import jsonschema

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
#: Errors kept per output: a list of 10,000 wrong items is not 10,000 useful lines.
MAX_ERRORS = 50

TRUNCATED_MESSAGE = "cut off at the token limit (finish_reason length)"
NO_JSON_MESSAGE = "no JSON object or array found in the output"
CUT_OFF_MESSAGE = "cut off: the output ends inside a string or with brackets left open"


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
            import jsonschema_rs  # with the first schema: a run without one never loads it

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
            found, repaired = find_json(text)
        except NotJsonConstant as exc:
            message = f"$: {exc} is not JSON (numbers must be finite)"
            if truncated:
                return OutputCheck(CheckStatus.TRUNCATED, (f"$: {TRUNCATED_MESSAGE}", message))
            return OutputCheck(CheckStatus.INVALID, (message,))
        except NoJSON:
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
        if truncated or repaired is CUT_OFF:
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
