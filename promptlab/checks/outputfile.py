"""Files of outputs produced anywhere, checked by `promptlab validate`.

Each line of an outputs file (JSON Lines) is one output:

- a JSON string: the output text itself, or
- an object with the text in `output` (or `text`), and optionally `finish_reason`
  (`length` marks it truncated) and `id` (shown instead of the line number), or
- a line of the OpenAI Batch output format (what `promptlab batch` writes): the text and
  finish reason of `response.body.choices[0]`, its `custom_id` as the id.

Anything else is refused, naming the file and the line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptlab.checks.rules import RuleSet, RuleStatus, parse_rules
from promptlab.checks.validation import CheckStatus, OutputCheck, check_schema
from promptlab.data.jsonl import numbered_json_values
from promptlab.data.lines import LineLimits
from promptlab.errors import OutputFileError, TemplateError
from promptlab.yamlio import read_yaml

#: An output is a model's answer, at most a few hundred kilobytes; a line of the OpenAI
#: Batch output format wraps it. A file as large as a dataset may be.
OUTPUTS_FILE = LineLimits(line_bytes=4 * 2**20, file_bytes=2**30, kind="an outputs file")


@dataclass(frozen=True)
class OutputLine:
    number: int
    id: str | None
    text: str
    finish_reason: str | None

    @property
    def label(self) -> str:
        return f"line {self.number}" + (f" ({self.id})" if self.id is not None else "")


def read_outputs(path: Path, limits: LineLimits = OUTPUTS_FILE) -> Iterator[OutputLine]:
    """Each output of the file, in order; OutputFileError names a bad line."""
    for number, value in numbered_json_values(path, limits, label="outputs", error=OutputFileError):
        yield _line(number, value, path)


def _line(number: int, value: Any, path: Path) -> OutputLine:
    if isinstance(value, str):
        return OutputLine(number, None, value, None)
    where = f"outputs {path}, line {number}"
    if not isinstance(value, Mapping):
        raise OutputFileError(
            f"{where}: expected a JSON string or an object with `output` or `text`"
        )
    ident = value.get("id", value.get("custom_id"))
    ident = None if ident is None else str(ident)
    if isinstance(value.get("response"), Mapping):
        return _batch_line(number, ident, value["response"], where)
    for name in ("output", "text"):
        if name in value:
            text = value[name]
            if not isinstance(text, str):
                raise OutputFileError(f"{where}: `{name}` must be a string")
            finish = value.get("finish_reason")
            if finish is not None and not isinstance(finish, str):
                raise OutputFileError(f"{where}: `finish_reason` must be a string")
            return OutputLine(number, ident, text, finish)
    raise OutputFileError(f"{where}: expected a JSON string or an object with `output` or `text`")


def _batch_line(
    number: int, ident: str | None, response: Mapping[str, Any], where: str
) -> OutputLine:
    body = response.get("body")
    choices = body.get("choices") if isinstance(body, Mapping) else None
    if not choices or not isinstance(choices[0], Mapping):
        raise OutputFileError(f"{where}: `response.body.choices` holds no answer")
    message = choices[0].get("message") or {}
    text = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(text, str):
        raise OutputFileError(f"{where}: `response.body.choices[0].message.content` is not text")
    finish = choices[0].get("finish_reason")
    return OutputLine(number, ident, text, finish if isinstance(finish, str) else None)


def load_rules(path: Path) -> RuleSet:
    """Rules from a YAML file: a list of rules, or a mapping with a `rules:` list."""
    data = read_yaml(path, error=OutputFileError)
    if isinstance(data, Mapping):
        data = data.get("rules")
    try:
        return RuleSet(parse_rules(data, where=f"rules {path}"))
    except TemplateError as exc:
        raise OutputFileError(str(exc)) from exc


def load_schema(path: Path) -> dict[str, Any]:
    """An output schema from a JSON (or YAML) file, checked as a template's would be."""
    schema = read_yaml(path, error=OutputFileError)  # YAML reads JSON too
    if not isinstance(schema, Mapping):
        raise OutputFileError(f"schema {path}: expected a JSON Schema object")
    try:
        return check_schema(schema, root=f"schema {path}")
    except TemplateError as exc:
        raise OutputFileError(str(exc)) from exc


@dataclass
class Tally:
    """Outputs counted per check status, for the summary line and the exit code."""

    counts: Counter[str] = field(default_factory=Counter)
    rules_failed: int = 0
    with_rules: bool = False

    def add(self, check: OutputCheck, rules: RuleStatus | None = None) -> None:
        self.counts[check.status.value] += 1
        if rules is RuleStatus.FAILED:
            self.rules_failed += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def unusable(self) -> int:
        """Invalid or truncated outputs, or failing a rule: the ones that make `validate`
        exit 1."""
        bad = CheckStatus.INVALID.value, CheckStatus.TRUNCATED.value
        return sum(self.counts[s] for s in bad) + self.rules_failed

    def as_dict(self) -> dict[str, int]:
        shown = ("valid", "repaired", "invalid", "truncated")
        rules = {"rules_failed": self.rules_failed} if self.with_rules else {}
        return {"outputs": self.total, **{s: self.counts[s] for s in shown}, **rules}

    def line(self) -> str:
        parts = ", ".join(
            f"{self.counts[s]} {s}" for s in ("valid", "repaired", "invalid", "truncated")
        )
        rules = f"; {self.rules_failed} failed a rule" if self.with_rules else ""
        return f"{self.total} outputs: {parts}{rules}"
