"""Output checks a plugin brings (promptlab/plugins/hookspecs.py `register_output_checks`),
and a spec's use of them: `output_checks: [no_email, {kind: no_email, severity: warning}]`.

Each check a spec names runs on every answer of the run (its text, and its JSON value
when the variant has an output schema), after the template's own schema and rules. Its
problems join the rules' in `results.rule_status` and `rule_errors`: a check of severity
`error` (the default) that finds one fails the item's rules, so the item does not
complete; `warning` only warns. A check runs in the bounds a rule does: on at most
MAX_CHECKED_CHARS of the output, its problems cut to MAX_PROBLEMS of at most 300
characters, and one that raises is a problem of its own, never the run's failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from promptlab.checks.rules import RuleStatus
from promptlab.errors import SpecError

#: Most checks a spec may name, characters of an output a check reads, problems kept.
MAX_CHECKS, MAX_CHECKED_CHARS, MAX_PROBLEMS = 10, 100_000, 10
SEVERITIES = ("error", "warning")


@dataclass(frozen=True)
class TextCheck:
    """A kind of output check a spec names by `kind:`."""

    name: str
    #: `check(text, parsed, options)`: the problems found (none: it passes); `parsed` is
    #: the output's JSON value when the variant has an output schema, else None.
    check: Callable[[str, Any, Mapping[str, Any]], Sequence[str]]
    #: The options a spec may give it (beside `kind` and `severity`).
    options: frozenset[str] = frozenset()
    #: Who registered it (set by the plugin manager).
    plugin: str = "promptlab"


@dataclass(frozen=True)
class CheckUse:
    """One check a spec names, with its severity and options."""

    kind: str
    severity: str = "error"
    options: Mapping[str, Any] = field(default_factory=dict)


def parse_output_checks(data: Any, where: str = "output_checks") -> tuple[CheckUse, ...]:
    """A spec's `output_checks:` checked against the registered kinds."""
    if data is None:
        return ()
    if not isinstance(data, list) or len(data) > MAX_CHECKS:
        raise SpecError(f"{where}: a list of at most {MAX_CHECKS} checks like [no_email]")
    return tuple(_use(item, f"{where}[{i}]") for i, item in enumerate(data))


def _use(item: Any, where: str) -> CheckUse:
    item = {"kind": item} if isinstance(item, str) else item
    if not isinstance(item, Mapping) or not isinstance(item.get("kind"), str):
        raise SpecError(f"{where}.kind: expected an output check's name")
    kinds = _kinds(item["kind"])
    if item["kind"] not in kinds:
        raise SpecError(f"{where}.kind: one of {', '.join(kinds) or 'none installed'}")
    severity = item.get("severity", "error")
    if severity not in SEVERITIES:
        raise SpecError(f"{where}.severity: error or warning, got {severity!r}")
    options = {k: v for k, v in item.items() if k not in ("kind", "severity")}
    unknown = sorted(set(options) - kinds[item["kind"]].options)
    if unknown:
        raise SpecError(f"{where}: {item['kind']} takes no {', '.join(unknown)}")
    return CheckUse(str(item["kind"]), str(severity), options)


def _kinds(needed: str | None = None) -> dict[str, TextCheck]:
    from promptlab.plugins.manager import plugins  # the registry; it imports this module

    return plugins().output_checks(needed)


def run_checks(uses: Sequence[CheckUse], text: str, parsed: Any) -> tuple[RuleStatus, list[str]]:
    """The checks' verdict on one output, and each problem as `kind: problem`."""
    kinds = _kinds()
    status, problems = RuleStatus.PASSED, []
    for use in uses:
        try:
            found = [
                str(p) for p in kinds[use.kind].check(text[:MAX_CHECKED_CHARS], parsed, use.options)
            ]
        except Exception as exc:  # noqa: BLE001 - a check's error is the item's, not the run's
            found = [f"check error: {type(exc).__name__}: {exc}"]
        if found:
            problems += [f"{use.kind}: {p}"[:300] for p in found[:MAX_PROBLEMS]]
            failed = use.severity == "error"
            status = (
                RuleStatus.FAILED if failed or status is RuleStatus.FAILED else RuleStatus.WARNED
            )
    return status, problems


def worse(a: RuleStatus | None, b: RuleStatus) -> RuleStatus:
    """The worse of two verdicts (None: no rules ran)."""
    order = (RuleStatus.PASSED, RuleStatus.WARNED, RuleStatus.FAILED)
    return b if a is None else max(a, b, key=order.index)
