"""Scorers: how right an output is against the row's expected answer, from 0 to 1.

A spec names the dataset column holding the expected answer (`expected: answer`) and
the scorers (`scorers:`); with none, `exact` (case and spaces ignored). Each scorer is
checked when the spec is parsed and never raises on an output:

- an output that is missing (the request failed) scores 0, status `no_output`;
- an output a scorer cannot read (no JSON where a field is asked for, no number) scores
  0, status `malformed`;
- a row with no expected value (a blank cell) is not scored: value None,
  `no_expected`, and it counts in no denominator.

Kinds: `exact` and `contains` (with `normalize:` any of case, whitespace, punctuation),
`regex` (the expected value, or `pattern:`, searched on RE2), `json_field` (`path:` into
the output's JSON equals the expected value), `numeric` (within `tolerance:`, absolute,
or `relative:`), `set_overlap` (lists as JSON arrays or split on `separator:`; the value
is F1, precision and recall in the detail) and `expression` (`expr:` in the rule
engine's safe expressions over `output`, `expected`, `parsed` and `row`: true, false or
a number from 0 to 1). These are registered through the hook a plugin's kinds go through
(`ScorerKind`, promptlab/plugins/): a spec names either alike.
"""

from __future__ import annotations

import functools
import math
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from promptlab.checks import patterns
from promptlab.checks.rules import FUNCTIONS, check_expression, wrap
from promptlab.checks.validation import extract_json
from promptlab.errors import PromptlabError, SpecError, TemplateError
from promptlab.providers.config import parse_model_ref

NORMALIZATIONS = ("case", "whitespace", "punctuation")
#: Most scorers a spec may name: each runs on every result.
MAX_SCORERS = 20
#: Longest output or expected text a scorer reads (a score is about answers, not books).
MAX_SCORED_CHARS = 100_000
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


class ScoreStatus(StrEnum):
    SCORED = "scored"
    NO_OUTPUT = "no_output"
    MALFORMED = "malformed"
    NO_EXPECTED = "no_expected"
    #: A judge's own call failed, or its answer held no verdict: not scored.
    NOT_JUDGED = "not_judged"


@dataclass(frozen=True)
class Score:
    #: 0 (wrong) to 1 (right); None when not scored (no expected value).
    value: float | None
    status: ScoreStatus
    detail: str = ""


@dataclass(frozen=True)
class Scorer:
    name: str
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def score(self, output: str | None, expected: Any, row: Mapping[str, Any]) -> Score:
        """How right `output` is against `expected`; never raises."""
        if expected is None or (isinstance(expected, str) and not expected.strip()):
            return Score(None, ScoreStatus.NO_EXPECTED, "no expected value")
        if output is None:
            return Score(0.0, ScoreStatus.NO_OUTPUT, "no output")
        try:
            return as_score(
                kind_of(self.kind).score(self, output[:MAX_SCORED_CHARS], expected, row)
            )
        except _Malformed as exc:
            return Score(0.0, ScoreStatus.MALFORMED, str(exc)[:300])
        except Exception as exc:  # noqa: BLE001 - a scorer's error is the item's, not the run's
            return Score(0.0, ScoreStatus.MALFORMED, f"{type(exc).__name__}: {exc}"[:300])


class _Malformed(Exception):
    """The output is not what the scorer reads (internal)."""


#: What a scorer kind's function gives: a Score, or true/false, or a number from 0 to 1.
Scored = Score | bool | float


@dataclass(frozen=True)
class ScorerKind:
    """A kind of scorer a spec names by `kind:`: built in, or a plugin's
    (promptlab/plugins/hookspecs.py `register_scorers`)."""

    name: str
    #: `score(scorer, output, expected, row)`: the scorer holds the spec's options. It is
    #: called only with an output and an expected value; an exception scores 0, malformed.
    score: Callable[[Scorer, str, Any, Mapping[str, Any]], Scored]
    #: The options a spec may give it (beside `kind` and `name`).
    options: frozenset[str] = frozenset()
    #: `check(options, where)`: refuse bad options at parse time (SpecError naming `where`).
    check: Callable[[dict[str, Any], str], None] | None = None
    #: Who registered it (set by the plugin manager).
    plugin: str = "promptlab"


def as_score(scored: Scored) -> Score:
    """A kind's answer as a Score: true/false as 1/0, a number from 0 to 1 as itself."""
    if isinstance(scored, Score):
        return scored
    if isinstance(scored, bool):
        return _binary(scored)
    if isinstance(scored, int | float) and 0 <= scored <= 1:
        return Score(float(scored), ScoreStatus.SCORED)
    raise _Malformed(f"the scorer gave {scored!r}, not true, false, 0 to 1 or a Score")


def kind_of(name: str) -> ScorerKind:
    """The registered scorer kind `name` (plugins load when it is not built in)."""
    from promptlab.plugins.manager import plugins  # the registry; it imports this module

    kinds = plugins().scorer_kinds(name)
    if name not in kinds:
        raise SpecError(f"kind: one of {', '.join(kinds)}, got {name!r}")
    return kinds[name]


def parse_scorers(data: Any, where: str = "scorers") -> tuple[Scorer, ...]:
    """The spec's scorers, each checked; names are unique."""
    if data is None:
        return (Scorer("exact", "exact", {"normalize": ["case", "whitespace"]}),)
    if not isinstance(data, list) or not data:
        raise SpecError(f"{where}: expected a list of scorers like {{kind: exact}}")
    if len(data) > MAX_SCORERS:
        raise SpecError(f"{where}: at most {MAX_SCORERS} scorers, got {len(data)}")
    scorers = tuple(_scorer(item, f"{where}[{i}]") for i, item in enumerate(data))
    names = [s.name for s in scorers]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: names must be unique (give `name:`), got {names}")
    return scorers


def _scorer(item: Any, where: str) -> Scorer:
    if isinstance(item, str):
        item = {"kind": item}
    if not isinstance(item, Mapping) or not isinstance(item.get("kind"), str):
        raise SpecError(f"{where}.kind: expected a scorer kind like exact")
    try:
        scorer_kind = kind_of(str(item["kind"]))
    except SpecError as exc:
        raise SpecError(f"{where}.{exc}") from None
    kind = scorer_kind.name
    unknown = sorted(set(item) - {"kind", "name"} - scorer_kind.options)
    if unknown:
        raise SpecError(f"{where}: {kind} takes no {', '.join(unknown)}")
    options = {k: v for k, v in item.items() if k not in ("kind", "name")}
    if scorer_kind.check is not None:
        scorer_kind.check(options, where)
    name = item.get("name", kind)
    if not isinstance(name, str) or not name.strip() or len(name) > 80:
        raise SpecError(f"{where}.name: expected a short name, got {name!r}")
    return Scorer(name.strip(), kind, options)


def _check_options(kind: str, options: dict[str, Any], where: str) -> None:
    """A built-in kind's options checked (each plugin kind brings its own check)."""
    normalize = options.get("normalize", [])
    if not isinstance(normalize, list) or set(normalize) - set(NORMALIZATIONS):
        raise SpecError(f"{where}.normalize: a list of {', '.join(NORMALIZATIONS)}")
    if "path" in options and (not isinstance(options["path"], str) or not options["path"]):
        raise SpecError(f"{where}.path: expected a dotted path like answer.label")
    if kind == "json_field" and "path" not in options:
        raise SpecError(f"{where}.path: json_field needs the output field to compare")
    for key in ("tolerance", "relative"):
        value = options.get(key, 0)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and value >= 0)
        ):
            raise SpecError(f"{where}.{key}: expected a number from 0 up, got {value!r}")
    if "separator" in options and (
        not isinstance(options["separator"], str) or not 1 <= len(options["separator"]) <= 5
    ):
        raise SpecError(f"{where}.separator: expected 1 to 5 characters")
    if "pattern" in options:
        if not isinstance(options["pattern"], str):
            raise SpecError(f"{where}.pattern: expected a regex as text")
        try:
            patterns.compile_pattern(options["pattern"])
        except TemplateError as exc:
            raise SpecError(f"{where}.pattern: {exc}") from exc
    if kind == "judge":
        _check_judge(options, where)
    if kind == "expression":
        try:  # its messages name the place: `scorers[0].expr: column 1: ...`
            options["expr"] = check_expression(options.get("expr"), f"{where}.expr")
        except TemplateError as exc:
            raise SpecError(str(exc)) from exc


def _check_judge(options: dict[str, Any], where: str) -> None:
    if not isinstance(options.get("prompt"), str) or not options["prompt"]:
        raise SpecError(f"{where}.prompt: a judge needs its rubric, a registry prompt ref")
    if "model" in options:
        try:
            parse_model_ref(str(options["model"]))
        except PromptlabError as exc:
            raise SpecError(f"{where}.model: {exc}") from exc
    field = options.setdefault("field", "score")
    if not isinstance(field, str) or not field:
        raise SpecError(f"{where}.field: the field of the judge's JSON answer, like score")


def verdict_score(answer: str | None, field: str) -> Score:
    """A judge's answer as a score: its `field` true or false, a number from 0 to 1, or
    pass/fail (right/wrong, yes/no, correct/incorrect)."""
    if answer is None:
        return Score(None, ScoreStatus.NOT_JUDGED, "the judge's call failed")
    try:
        value = _field(_parsed(answer), field)
    except _Malformed as exc:
        return Score(None, ScoreStatus.NOT_JUDGED, f"judge: {exc}")
    if isinstance(value, bool):
        return _binary(value)
    if isinstance(value, int | float) and 0 <= value <= 1:
        return Score(float(value), ScoreStatus.SCORED)
    word = str(value).strip().casefold()
    if word in _RIGHT or word in _WRONG:
        return _binary(word in _RIGHT)
    return Score(None, ScoreStatus.NOT_JUDGED, f"judge: {field} is {str(value)[:80]!r}")


_RIGHT = frozenset({"pass", "right", "correct", "yes", "true"})
_WRONG = frozenset({"fail", "wrong", "incorrect", "no", "false"})


# ---- the kinds ---------------------------------------------------------------------------


def _normalized(text: Any, how: Sequence[str]) -> str:
    out = str(text)
    if "case" in how:
        out = out.casefold()
    if "punctuation" in how:
        out = out.translate(str.maketrans("", "", string.punctuation))
    if "whitespace" in how:
        out = " ".join(out.split())
    return out.strip()


def _exact(s: Scorer, output: str, expected: Any, _row: Mapping[str, Any]) -> Score:
    how = s.options.get("normalize", [])
    return _binary(_normalized(output, how) == _normalized(expected, how))


def _contains(s: Scorer, output: str, expected: Any, _row: Mapping[str, Any]) -> Score:
    how = s.options.get("normalize", [])
    return _binary(_normalized(expected, how) in _normalized(output, how))


def _regex(s: Scorer, output: str, expected: Any, _row: Mapping[str, Any]) -> Score:
    pattern = s.options.get("pattern", str(expected))
    try:
        return _binary(patterns.search(pattern, output))
    except patterns.PatternError as exc:  # an expected value RE2 cannot run
        return Score(0.0, ScoreStatus.MALFORMED, f"expected pattern: {exc}")


def _json_field(s: Scorer, output: str, expected: Any, _row: Mapping[str, Any]) -> Score:
    value = _field(_parsed(output), s.options["path"])
    how = s.options.get("normalize", [])
    if isinstance(value, bool | int | float) and not isinstance(expected, str):
        return _binary(value == expected)
    return _binary(_normalized(_text(value), how) == _normalized(_text(expected), how))


def _numeric(s: Scorer, output: str, expected: Any, _row: Mapping[str, Any]) -> Score:
    got = _number(_field(_parsed(output), s.options["path"]) if "path" in s.options else output)
    want = _number(expected, expected_value=True)
    allowed = max(
        float(s.options.get("tolerance", 0)), float(s.options.get("relative", 0)) * abs(want)
    )
    return _binary(abs(got - want) <= allowed, f"{got:g} vs {want:g}")


def _set_overlap(s: Scorer, output: str, expected: Any, _row: Mapping[str, Any]) -> Score:
    source: Any = _field(_parsed(output), s.options["path"]) if "path" in s.options else output
    got, want = _items(s, source, output=True), _items(s, expected, output=False)
    if not want:
        return Score(None, ScoreStatus.NO_EXPECTED, "the expected list is empty")
    hits = len(got & want)
    precision = hits / len(got) if got else 0.0
    recall = hits / len(want)
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return Score(f1, ScoreStatus.SCORED, f"precision {precision:.2f}, recall {recall:.2f}")


def _judge(_s: Scorer, _output: str, _expected: Any, _row: Mapping[str, Any]) -> Score:
    # Scored by a run of its own (promptlab/evaluation/judges.py), never here.
    raise _Malformed("a judge scores through its own run")


def _expression(s: Scorer, output: str, expected: Any, row: Mapping[str, Any]) -> Score:
    try:
        parsed: Any = extract_json(output)[0]
    except Exception:  # noqa: BLE001 - not JSON: `parsed` is None, the text is still there
        parsed = None
    # Imported by the first expression scored: a run that scores none never loads it.
    from simpleeval import EvalWithCompoundTypes

    evaluator = EvalWithCompoundTypes(
        functions=dict(FUNCTIONS),
        names={
            "output": output,
            "expected": wrap(expected),
            "parsed": wrap(parsed),
            "row": wrap(dict(row)),
        },
    )
    result = evaluator.eval(s.options["expr"])
    if isinstance(result, bool):
        return _binary(result)
    if isinstance(result, int | float) and 0 <= result <= 1:
        return Score(float(result), ScoreStatus.SCORED)
    raise _Malformed(f"`{s.options['expr']}` gave {result!r}, not true, false or 0 to 1")


_BUILT_IN: dict[str, tuple[Callable[[Scorer, str, Any, Mapping[str, Any]], Score], set[str]]] = {
    "exact": (_exact, {"normalize"}),
    "contains": (_contains, {"normalize"}),
    "regex": (_regex, {"pattern"}),
    "json_field": (_json_field, {"path", "normalize"}),
    "numeric": (_numeric, {"path", "tolerance", "relative"}),
    "set_overlap": (_set_overlap, {"path", "separator", "normalize"}),
    "expression": (_expression, {"expr"}),
    "judge": (_judge, {"prompt", "model", "field"}),
}


def built_in_kinds() -> list[ScorerKind]:
    """The scorer kinds promptlab brings (registered by promptlab/plugins/builtins.py)."""
    return [
        ScorerKind(name, score, frozenset(options), functools.partial(_check_options, name))
        for name, (score, options) in _BUILT_IN.items()
    ]


def _binary(right: bool, detail: str = "") -> Score:
    return Score(1.0 if right else 0.0, ScoreStatus.SCORED, detail)


def _parsed(output: str) -> Any:
    try:
        return extract_json(output)[0]
    except Exception as exc:  # noqa: BLE001 - no JSON at all
        raise _Malformed("the output holds no JSON") from exc


def value_at(value: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at a dotted path (`label`, `items.0.id`) into parsed JSON."""
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _field(value: Any, path: str) -> Any:
    found, got = value_at(value, path)
    if not found:
        raise _Malformed(f"the output has no {path}")
    return got


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _number(value: Any, expected_value: bool = False) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        found = _NUMBER.search(str(value)[:1_000])
        if found is None:
            raise _Malformed(
                f"{'the expected value' if expected_value else 'the output'} holds no number"
            )
        number = float(found.group())
    if not math.isfinite(number):
        raise _Malformed("not a finite number")
    return number


def _items(s: Scorer, value: Any, *, output: bool) -> set[str]:
    how = s.options.get("normalize", ["case", "whitespace"])
    if isinstance(value, str):
        try:
            parsed = extract_json(value)[0] if value.strip().startswith("[") else None
        except Exception:  # noqa: BLE001 - not a JSON list: split it
            parsed = None
        value = parsed if isinstance(parsed, list) else value.split(s.options.get("separator", ","))
    if not isinstance(value, list):
        raise _Malformed(f"{'the output' if output else 'the expected value'} is not a list")
    return {n for n in (_normalized(_text(v), how) for v in value[:10_000]) if n}
