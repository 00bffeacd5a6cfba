"""Business rules over a parsed output: required fields, patterns, ranges, enums, and
expressions (`total == sum(items.price)`, `size(summary) <= 280`).

Expressions are evaluated by simpleeval (a small, safe evaluator of Python expression
syntax: no calls but the functions listed in FUNCTIONS, no names starting with `_`,
never Python's `eval`). The output's top-level fields are names; `output` is the whole
value. A dotted lookup on a list projects over its items, so `items.price` is the list
of every item's price.

A rule is checked when saved (a syntax error is refused with its column); at run time a
rule that raises is recorded as a rule error on that item and the run goes on. Rules of
severity `error` (the default) fail completion; `warning`s are recorded only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

from promptlab.checks import patterns
from promptlab.checks.schema_messages import shorten
from promptlab.errors import TemplateError

__all__ = [
    "FUNCTIONS",
    "Rule",
    "RuleOutcome",
    "RuleSet",
    "RuleStatus",
    "check_expression",
    "parse_rules",
    "wrap",
]

SEVERITIES = ("error", "warning")
#: Longest expression accepted: rules are one-liners, not programs.
MAX_EXPR_CHARS = 1_000
_KINDS = ("expr", "required", "pattern", "minimum", "maximum", "enum")
_KEYS = {"name", "severity", "field", *_KINDS}


def _size(value: Any) -> int:
    return len(value)


def _matches(text: Any, pattern: str) -> bool:
    # RE2, linear in the text: a pattern computed at run time is checked here, and one
    # RE2 cannot run raises PatternError, recorded as a rule error on the item.
    return isinstance(text, str) and patterns.search(pattern, text)


#: The only functions an expression may call.
FUNCTIONS: dict[str, Any] = {
    "size": _size,
    "len": _size,
    "sum": sum,
    "min": min,
    "max": max,
    "abs": abs,
    "round": round,
    "any": any,
    "all": all,
    "matches": _matches,
    "lower": lambda s: str(s).lower(),
    "upper": lambda s: str(s).upper(),
}


class RuleStatus(StrEnum):
    """An output's rules, summed up: the text stored in `results.rule_status`."""

    PASSED = "passed"
    #: Only warnings failed.
    WARNED = "warned"
    #: A rule of severity error failed or raised: the item does not complete.
    FAILED = "failed"


@dataclass(frozen=True)
class Rule:
    name: str
    severity: str
    #: One of _KINDS; `value` is the expression text, field list, pattern, bound or enum.
    kind: str
    value: Any
    field: str | None = None


@dataclass(frozen=True)
class RuleOutcome:
    rule: Rule
    passed: bool
    #: Why it failed, or the error it raised.
    message: str = ""

    def __str__(self) -> str:
        severity = "" if self.rule.severity == "error" else f" ({self.rule.severity})"
        return f"{self.rule.name}{severity}: {self.message}"


def parse_rules(data: Any, where: str = "rules") -> tuple[Rule, ...]:
    """Rules from their author's form; TemplateError names the rule and the problem."""
    if data is None:
        return ()
    if not isinstance(data, Sequence) or isinstance(data, str | bytes):
        raise TemplateError(f"{where}: expected a list of rules")
    return tuple(_rule(item, f"{where}[{i}]") for i, item in enumerate(data))


def _rule(item: Any, where: str) -> Rule:
    if not isinstance(item, Mapping):
        raise TemplateError(f"{where}: expected a mapping (expr, required, pattern, ...)")
    unknown = set(item) - _KEYS
    if unknown:
        raise TemplateError(
            f"{where}: unknown keys {', '.join(sorted(map(str, unknown)))}; "
            f"allowed: {', '.join(sorted(_KEYS))}"
        )
    kinds = [k for k in _KINDS if k in item]
    bounds = {"minimum", "maximum"}
    if not kinds or (len(kinds) > 1 and set(kinds) != bounds & set(kinds)):
        raise TemplateError(
            f"{where}: give exactly one of expr, required, pattern, enum, or minimum/maximum"
        )
    name = str(item.get("name") or where)
    if "name" in item:
        where = f"{where} ({name})"
    severity = item.get("severity", "error")
    if severity not in SEVERITIES:
        raise TemplateError(f"{where}: severity must be error or warning")
    kind = kinds[0]
    field = item.get("field")
    if kind in ("pattern", "minimum", "maximum", "enum") and not isinstance(field, str):
        raise TemplateError(f"{where}: {kind} needs `field` (a dotted path)")
    value: Any
    if kind == "expr":
        value = check_expression(item["expr"], where)
    elif kind == "required":
        value = item["required"]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TemplateError(f"{where}: required must be a list of field paths")
        value = tuple(value)
    elif kind == "pattern":
        value = _pattern(item["pattern"], f"{where}.pattern")
    elif kind == "enum":
        if not isinstance(item["enum"], list):
            raise TemplateError(f"{where}: enum must be a list")
        value = tuple(item["enum"])
    else:
        for bound in bounds & set(kinds):
            if isinstance(item[bound], bool) or not isinstance(item[bound], int | float):
                raise TemplateError(f"{where}: {bound} must be a number")
        kind, value = "range", (item.get("minimum"), item.get("maximum"))
    return Rule(name, severity, kind, value, field)


def check_expression(text: Any, where: str) -> str:
    """A safe expression, checked (syntax, names, the functions it may call); the text."""
    if not isinstance(text, str) or not text.strip():
        raise TemplateError(f"{where}: expr must be a non-empty expression")
    if len(text) > MAX_EXPR_CHARS:
        raise TemplateError(f"{where}: expr longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        # Python reports an expression that stops short at offset 0.
        at = f"column {exc.offset}" if exc.offset else f"the end (column {len(text.strip()) + 1})"
        raise TemplateError(f"{where}: syntax error at {at}: {exc.msg}") from exc
    for node in ast.walk(tree):
        column = getattr(node, "col_offset", 0) + 1
        if isinstance(node, ast.Lambda | ast.NamedExpr | ast.Await | ast.Yield):
            raise TemplateError(f"{where}: column {column}: {type(node).__name__} not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise TemplateError(f"{where}: column {column}: names may not start with '_'")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise TemplateError(f"{where}: column {column}: fields may not start with '_'")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
        ):
            raise TemplateError(
                f"{where}: column {column}: only these functions may be called: "
                f"{', '.join(sorted(FUNCTIONS))}"
            )
        # A pattern written out in `matches(text, '...')` is checked now; one computed
        # while the rule runs is checked then.
        if _calls_matches(node) and isinstance(pattern := node.args[1], ast.Constant):
            _pattern(pattern.value, f"{where}: column {column}: matches()")
    return text.strip()


def _calls_matches(node: ast.AST) -> TypeGuard[ast.Call]:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "matches"
        and len(node.args) == 2
    )


def _pattern(pattern: Any, where: str) -> str:
    """`pattern` if RE2 can run it; else TemplateError naming the rule."""
    if not isinstance(pattern, str):
        raise TemplateError(f"{where}: expected a regex as text")
    try:
        patterns.compile_pattern(pattern)
    except patterns.PatternError as exc:
        raise TemplateError(f"{where}: {exc}") from exc
    return pattern


# ---- evaluation --------------------------------------------------------------------------


# Not a PromptlabError: an internal signal (a path the record lacks), caught in this module.
class _Missing(Exception):
    pass


class Record:
    """A JSON object seen by an expression: fields by `.name` or `["name"]`, nothing else."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._data:
            raise AttributeError(name)
        return wrap(self._data[name])

    def __getitem__(self, name: str) -> Any:
        return wrap(self._data[name])

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __eq__(self, other: object) -> bool:
        return self._data == (other._data if isinstance(other, Record) else other)

    __hash__ = None  # type: ignore[assignment]


class Items:
    """A JSON array seen by an expression; `.field` projects over its objects."""

    __slots__ = ("_data",)

    def __init__(self, data: Sequence[Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Items:
        if name.startswith("_"):
            raise AttributeError(name)
        return Items([_field(item, name) for item in self._data])

    def __getitem__(self, index: int) -> Any:
        return wrap(self._data[index])

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Any]:
        return (wrap(item) for item in self._data)

    def __contains__(self, value: object) -> bool:
        return value in self._data

    def __eq__(self, other: object) -> bool:
        return list(self._data) == (list(other._data) if isinstance(other, Items) else other)

    __hash__ = None  # type: ignore[assignment]


def _field(item: Any, name: str) -> Any:
    if isinstance(item, Mapping) and name in item:
        return item[name]
    raise AttributeError(name)


def wrap(value: Any) -> Any:
    if isinstance(value, Mapping):
        return Record(value)
    if isinstance(value, list | tuple):
        return Items(value)
    return value


def _lookup(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            raise _Missing(path)
    return value


class RuleSet:
    """A template's rules, ready to check parsed outputs."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def check(self, parsed: Any) -> tuple[RuleStatus, tuple[RuleOutcome, ...]]:
        """Every rule on `parsed`; never raises (a rule that raises is a failed outcome)."""
        outcomes = tuple(self._one(rule, parsed) for rule in self.rules)
        failed = [o for o in outcomes if not o.passed]
        if any(o.rule.severity == "error" for o in failed):
            return RuleStatus.FAILED, tuple(failed)
        return (RuleStatus.WARNED if failed else RuleStatus.PASSED), tuple(failed)

    def _one(self, rule: Rule, parsed: Any) -> RuleOutcome:
        try:
            return self._evaluate(rule, parsed)
        except _Missing as exc:
            return RuleOutcome(rule, False, f"{exc.args[0]} is missing")
        except Exception as exc:  # noqa: BLE001 - recorded as a rule error; the run goes on
            return RuleOutcome(rule, False, f"rule error: {type(exc).__name__}: {exc}"[:300])

    def _evaluate(self, rule: Rule, parsed: Any) -> RuleOutcome:
        if rule.kind == "expr":
            # Imported by the first expression checked, not by every process that may.
            from simpleeval import EvalWithCompoundTypes

            names = dict(parsed) if isinstance(parsed, Mapping) else {}
            evaluator = EvalWithCompoundTypes(
                functions=dict(FUNCTIONS),  # it adds its own to the dict it is given
                names={**{k: wrap(v) for k, v in names.items()}, "output": wrap(parsed)},
            )
            result = evaluator.eval(rule.value)
            if not isinstance(result, bool):
                return RuleOutcome(
                    rule, False, f"rule error: `{rule.value}` gave {result!r}, not true or false"
                )
            return RuleOutcome(rule, result, "" if result else f"`{rule.value}` is false")
        if rule.kind == "required":
            missing = [p for p in rule.value if not _present(parsed, p)]
            return RuleOutcome(
                rule, not missing, f"missing {', '.join(missing)}" if missing else ""
            )
        assert rule.field is not None
        value = _lookup(parsed, rule.field)
        if rule.kind == "pattern":
            ok = isinstance(value, str) and patterns.search(rule.value, value)
            why = f"{rule.field}: {shorten(value)} does not match {rule.value!r}"
            return RuleOutcome(rule, ok, "" if ok else why)
        if rule.kind == "enum":
            ok = value in rule.value
            why = f"{rule.field}: {shorten(value)} is not one of {list(rule.value)}"
            return RuleOutcome(rule, ok, "" if ok else why)
        low, high = rule.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            return RuleOutcome(rule, False, f"{rule.field}: {value!r} is not a number")
        ok = (low is None or value >= low) and (high is None or value <= high)
        return RuleOutcome(
            rule, ok, "" if ok else f"{rule.field}: {value!r} is outside [{low}, {high}]"
        )


def _present(parsed: Any, path: str) -> bool:
    try:
        value = _lookup(parsed, path)
    except _Missing:
        return False
    return value is not None and value != ""
