"""`wb.analysis.decisions`: the final look at two versions in production logs, taken
once, by a person, when the planned units are in.

Logs keep arriving, so Compare reads them with the always-valid test (1% of the 5%).
The fixed-horizon final look (the other 4%) may be taken once per pair of versions:
after it, looking again and deciding again would spend the 5% twice. `decide` refuses
before every arm has the planned units, takes the final look, stores it with its
figures, the person and the time (promptlab/store/decisions.py), and records a
`comparison.decided` audit event; `get` gives it back, and the Compare page shows it
instead of the live view from then on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from promptlab.analysis.compare import FINAL_LOOK, Comparison, parse_since
from promptlab.analysis.sequential import DEFAULT_PLANNED_UNITS
from promptlab.analysis.stats import Interval, MetricComparison, Verdict
from promptlab.errors import PromptlabError
from promptlab.facades.context import Context
from promptlab.store.decisions import LogDecision, LogDecisions

__all__ = ["Decided", "Decisions"]

_INTERVALS = ("interval", "control_interval", "variant_interval")
_FIELDS = {f.name for f in dataclasses.fields(MetricComparison)}


@dataclass(frozen=True)
class Decided:
    """A stored decision and its final look as a comparison (the page's table)."""

    record: LogDecision
    comparison: Comparison

    @property
    def line(self) -> str:
        r = self.record
        return (
            f"Decided: {r.label_b} against {r.label_a}, the final look taken "
            f"{r.decided_at:%Y-%m-%d %H:%M} UTC by {r.decided_by} at {r.units_a:,} and "
            f"{r.units_b:,} units (planned {r.planned_units:,} per arm). These are its "
            "figures as stored; logs that came later do not change them."
        )


class Decisions:
    def __init__(
        self,
        context: Context,
        compare_versions: Callable[..., Comparison],
        version_label: Callable[[str], tuple[str, str]],
    ) -> None:
        self._context = context
        self._rows = LogDecisions(context.store)
        self._compare = compare_versions
        self._label = version_label

    def get(self, ref_a: str, ref_b: str) -> Decided | None:
        """The decision taken on version B against A in the logs, or None."""
        (id_a, _), (id_b, _) = self._label(ref_a), self._label(ref_b)
        found = self._rows.get(id_a, id_b)
        return None if found is None else Decided(found, _comparison_of(found))

    def decide(
        self,
        ref_a: str,
        ref_b: str,
        *,
        planned_units: int | None = None,
        since: datetime | str | None = None,
    ) -> Decided:
        """Take the final look at B against A in the production logs, once; refused
        before each arm has `planned_units` units (default 1,000) and after a decision."""
        (id_a, label_a), (id_b, label_b) = self._label(ref_a), self._label(ref_b)
        earlier = self._rows.get(id_a, id_b)
        if earlier is not None:
            raise PromptlabError(_taken(earlier))
        planned = planned_units or DEFAULT_PLANNED_UNITS
        now = self._context.store.clock.now()
        when = parse_since(since, now) if isinstance(since, str) else since
        comparison = self._compare(
            ref_a, ref_b, logs=True, since=when, sequential=False, planned_units=planned
        )
        units_a, units_b = (units for units, _ in comparison.arms.values())
        if min(units_a, units_b) < planned:
            raise PromptlabError(
                f"not yet: the final look at {label_b} against {label_a} waits for the "
                f"planned {planned:,} units per arm ({label_a} has {units_a:,}, {label_b} "
                f"has {units_b:,}); until then read the live view (always valid)"
            )
        record = LogDecision(
            version_a=id_a,
            version_b=id_b,
            label_a=label_a,
            label_b=label_b,
            decided_at=now,
            decided_by=self._context.author(),
            planned_units=planned,
            since=when,
            method=comparison.method,
            units_a=units_a,
            units_b=units_b,
            family_size=comparison.family_size,
            rows=tuple(_plain(asdict(row)) for row in comparison.rows),
        )
        if not self._rows.insert(record):
            taken = self._rows.get(id_a, id_b)
            raise PromptlabError(_taken(taken) if taken else "the decision was not stored")
        self._context.audit_change("comparison.decided", record.decided_by, _event(record))
        return Decided(record, comparison)


def _taken(found: LogDecision) -> str:
    return (
        f"{found.label_b} against {found.label_a} was decided on "
        f"{found.decided_at:%Y-%m-%d %H:%M} UTC by {found.decided_by}: a final look is "
        "taken once (Compare shows it)"
    )


def _event(record: LogDecision) -> dict[str, Any]:
    """The audit event's payload: the pair, the units and each row's figures."""
    keep = ("metric", "effect", "interval", "p_value", "adjusted_p", "verdict")
    return {
        "version_a": record.label_a,
        "version_b": record.label_b,
        "planned_units": record.planned_units,
        "units": [record.units_a, record.units_b],
        "method": record.method,
        "rows": [{k: row.get(k) for k in keep} for row in record.rows],
    }


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Verdict) else v) for k, v in row.items()}


def _row_of(stored: dict[str, Any]) -> MetricComparison:
    fields = {k: v for k, v in stored.items() if k in _FIELDS}
    for name in _INTERVALS:
        if fields.get(name) is not None:
            fields[name] = Interval(**fields[name])
    fields["verdict"] = Verdict(fields.get("verdict", Verdict.UNDECIDED))
    return MetricComparison(**fields)


def _comparison_of(found: LogDecision) -> Comparison:
    rows = [_row_of(row) for row in found.rows]
    # Each arm's requests as its rows counted them (the same on every metric's row).
    requests_a = max((r.requests_control for r in rows), default=0)
    requests_b = max((r.requests_variant for r in rows), default=0)
    return Comparison(
        run_id="",
        mode="logs",
        control=found.label_a,
        paired=False,
        rows=rows,
        srm=None,
        metrics=[],
        method=found.method or FINAL_LOOK,
        planned_units=found.planned_units,
        family_size=found.family_size,
        arms={
            found.label_a: (found.units_a, requests_a),
            found.label_b: (found.units_b, requests_b),
        },
    )
