"""The metrics a comparison declares: one primary (the metric that decides) and the rest
guardrails. Holm's family is that declaration times the variants compared against
control, fixed before anyone looks: picking one variant on a page, or a row with too few
units, never changes another row's adjusted p-value (rows that cannot be tested count
as p = 1). A metric shown but not declared is exploratory: its p-value is shown, it gets
no verdict.

A run spec declares it under `metrics:`; without one, completion rate decides and every
other metric compare shows is a guardrail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from promptlab.records.unit_samples import COMPLETION, CTR, SCORE_PREFIX

LATENCY_METRICS = ("latency p50", "latency p90", "latency p99")
#: What compare tests besides scores, in the table's order.
STANDARD_METRICS = (COMPLETION, CTR, *LATENCY_METRICS)
METRICS_FIELDS = frozenset({"primary", "guardrails"})


class FamilyError(ValueError):
    """A `metrics:` declaration that names no metric compare tests; says where."""


@dataclass(frozen=True)
class MetricFamily:
    primary: str
    guardrails: tuple[str, ...]
    #: True when the spec declared it; False for the default.
    declared: bool = False

    @property
    def metrics(self) -> tuple[str, ...]:
        return (self.primary, *self.guardrails)

    def describe(self) -> str:
        guards = ", ".join(self.guardrails) or "none"
        how = "declared" if self.declared else "by default"
        return f"decides: {self.primary} (primary, {how}); guardrails: {guards}"


def default_family(scores: Iterable[str] = ()) -> MetricFamily:
    """Completion rate decides; CTR, latency and every score are guardrails."""
    score_metrics = tuple(sorted(_score(s) for s in scores))
    return MetricFamily(COMPLETION, (*STANDARD_METRICS[1:], *score_metrics))


def parse_family(value: Any, scorer_names: Iterable[str]) -> MetricFamily:
    """A spec's `metrics:` block checked: names as compare shows them (`completion rate`
    or `completion`, `CTR`, `latency p90`, `score: NAME` of a declared scorer)."""
    known = {_key(m): m for m in (*STANDARD_METRICS, *(_score(n) for n in scorer_names))}
    known[_key("completion")] = COMPLETION
    if not isinstance(value, Mapping) or set(value) - METRICS_FIELDS or "primary" not in value:
        raise FamilyError("metrics: expected {primary: METRIC, guardrails: [METRIC, ...]}")

    def one(name: Any, where: str) -> str:
        found = known.get(_key(name)) if isinstance(name, str) else None
        if found is None:
            raise FamilyError(
                f"{where}: {name!r} is not a metric compare tests (one of: "
                f"{', '.join(dict.fromkeys(known.values()))})"
            )
        return found

    primary = one(value["primary"], "metrics.primary")
    guardrails_data = value.get("guardrails", [])
    if not isinstance(guardrails_data, list):
        raise FamilyError("metrics.guardrails: expected a list of metrics")
    guardrails = tuple(
        one(name, f"metrics.guardrails[{i}]") for i, name in enumerate(guardrails_data)
    )
    if len({primary, *guardrails}) != 1 + len(guardrails):
        raise FamilyError("metrics: each metric once (the primary is not also a guardrail)")
    return MetricFamily(primary, guardrails, declared=True)


def declared(spec: Mapping[str, Any], key: str) -> Any:
    """A stored run spec's `key`, else its experiment's (a run of an experiment carries
    the revision's own declarations: mode, metrics, planned units); None when neither."""
    value = spec.get(key)
    experiment = spec.get("experiment")
    if value is None and isinstance(experiment, Mapping):
        value = experiment.get(key)
    return value


def family_of(spec: Mapping[str, Any]) -> MetricFamily:
    """The family a stored run spec (or its experiment) declares, or the default for its
    scorers."""
    scorers = [_scorer_name(s) for s in spec.get("scorers") or []] if spec.get("expected") else []
    metrics = declared(spec, "metrics")
    return parse_family(metrics, scorers) if metrics else default_family(scorers)


def _scorer_name(item: Any) -> str:
    """A stored spec's scorer as its metric's name: `exact`, or `{kind, name}`."""
    if isinstance(item, Mapping):
        return str(item.get("name") or item.get("kind")).strip()
    return str(item).strip()


def _score(name: str) -> str:
    return name if name.startswith(SCORE_PREFIX) else SCORE_PREFIX + name


def _key(name: str) -> str:
    return " ".join(name.lower().replace(":", ": ").split())
