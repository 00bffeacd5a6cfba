"""Two versions across runs, compared within the runs that hold both: no silent pooling.

Pooling every result of version A against every result of version B mixes whatever
else differed between their runs (the model, the dataset, a replay's history) into the
difference, and can reverse it (Simpson's paradox: B faster inside every run, slower
pooled, because B ran more often on the slow model). So:

- a **stratum** is one run on one endpoint and model where both versions have results;
  the versions are compared inside it (paired over the same inputs when the run sent
  every row to both, per unit otherwise);
- **several strata** are combined by a stratified estimate: each stratum's effect
  weighted by its inverse variance (a fixed-effect meta-analysis), so no stratum's mix
  of versions leaks into the difference. Each version's value is its strata's values
  weighted the same way, so variant - control is the combined delta (pooled values can
  point the other way); each stratum's own rows are kept (`Comparison.strata`);
- finished results are the **final look** (4% of the 5%), as a finished run's own
  comparison is: the same data shows the same interval level in every view;
- runs that hold only one of the versions are left out, and the comparison says which;
- with **no stratum**, the versions are pooled only when all their runs used one model,
  dataset and history mode (the comparison says so); otherwise it is refused with one
  line naming what differs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from promptlab.analysis.compare import (
    METHODS,
    Comparison,
    apart,
    arms_of,
    clustering,
    compare_arms,
    compare_paired,
    run_mode,
    since_text,
)
from promptlab.analysis.decided import decided
from promptlab.analysis.sequential import FINAL, Look, interim
from promptlab.analysis.stats import (
    NO_DATA,
    MetricComparison,
    Verdict,
    family_size,
    holm_verdicts,
    minimum_units,
    too_few,
)
from promptlab.analysis.units import Estimate
from promptlab.errors import PromptlabError
from promptlab.records.family import default_family
from promptlab.records.unit_samples import SCORE_PREFIX

if TYPE_CHECKING:
    from datetime import datetime

    from promptlab.records import RunRecord
    from promptlab.records.unit_samples import ArmSample, VersionStratum
    from promptlab.store.metrics import MetricsReads
    from promptlab.store.unit_samples import SampleReads

#: What a run was made with, as far as pooling goes: what must agree to pool runs.
SETTINGS = ("model", "dataset", "history mode")


@dataclass(frozen=True)
class Strata:
    """How two versions' results split over runs: the strata holding both, the runs
    left out (one version only), and the one-line notes a comparison shows."""

    shared: list[VersionStratum]
    left_out: list[VersionStratum]

    @property
    def results_a(self) -> int:
        return sum(s.results_a for s in (*self.shared, *self.left_out))

    @property
    def results_b(self) -> int:
        return sum(s.results_b for s in (*self.shared, *self.left_out))

    def describe(self) -> str:
        """What the comparison was made within."""
        inside = ", ".join(f"{s.run_id} on {s.model_name}" for s in self.shared[:5])
        more = f" and {len(self.shared) - 5} more" if len(self.shared) > 5 else ""
        how = (
            "combined by a stratified estimate (each run's effect weighted by its precision)"
            if len(self.shared) > 1
            else "nothing pooled across runs"
        )
        runs = f"{len(self.shared)} run{'s' if len(self.shared) != 1 else ''}"
        return f"compared within {runs} holding both versions ({inside}{more}); {how}"

    def left_out_notes(self, names: tuple[str, str]) -> list[str]:
        """A warning naming the runs holding one version only, if any."""
        if not self.left_out:
            return []
        parts = [
            f"{s.run_id} ({names[0] if s.results_a else names[1]} only, {s.model_name})"
            for s in self.left_out[:5]
        ]
        more = f" and {len(self.left_out) - 5} more" if len(self.left_out) > 5 else ""
        return [
            f"left out: {len(self.left_out)} run{'s' if len(self.left_out) != 1 else ''} "
            f"holding one version only: {', '.join(parts)}{more}"
        ]


def split_strata(strata: Sequence[VersionStratum]) -> Strata:
    return Strata([s for s in strata if s.shared], [s for s in strata if not s.shared])


def run_settings(run: RunRecord, model: str) -> dict[str, str]:
    """The settings a pooled comparison must not mix, for one run on one model."""
    spec = run.spec
    dataset = spec.get("dataset")
    history = spec.get("history")
    mode = history.get("mode") if isinstance(history, dict) else history
    return {
        "model": model,
        "dataset": str(dataset) if dataset is not None else "(none)",
        "history mode": str(mode) if mode is not None else "(not a replay)",
    }


def check_poolable(
    strata: Sequence[VersionStratum], run_of: Callable[[str], RunRecord], names: tuple[str, str]
) -> str:
    """With no run holding both versions: a note saying what the pooled runs share, or
    PromptlabError naming the first setting in which the versions' runs differ."""
    seen: dict[str, tuple[set[str], set[str]]] = {k: (set(), set()) for k in SETTINGS}
    for stratum in strata:
        settings = run_settings(run_of(stratum.run_id), stratum.model_name)
        for key, value in settings.items():
            seen[key][0 if stratum.results_a else 1].add(value)
    for key in SETTINGS:
        a, b = seen[key]
        if len(a | b) > 1:
            raise PromptlabError(
                f"{names[0]} and {names[1]} never ran in the same run, and their runs differ "
                f"in {key} ({names[0]}: {', '.join(sorted(a))}; {names[1]}: "
                f"{', '.join(sorted(b))}): pooling them would compare the {key} too. "
                "Compare them within one run (--run RUN), or run both in one"
            )
    runs = len({s.run_id for s in strata})
    model = next(iter(seen["model"][0] | seen["model"][1]), "?")
    return (
        f"pooled across {runs} run{'s' if runs != 1 else ''} (no run holds both versions; "
        f"all ran on {model} with the same dataset and history mode)"
    )


def compare_across_runs(
    reads: MetricsReads,
    samples: SampleReads,
    a: tuple[str, str],
    b: tuple[str, str],
    run_of: Callable[[str], RunRecord],
    *,
    since: datetime | None = None,
    sequential: bool = False,
    planned_units: int | None = None,
    keep_shared: bool = False,
) -> Comparison:
    """Version B against version A, each (version id, label), from their results: within
    each run, endpoint and model holding both, combined over them; pooled only when no
    run holds both and all their runs agree on SETTINGS (else PromptlabError). Units a
    split assigned to both are left out unless `keep_shared`."""
    (id_a, name_a), (id_b, name_b) = a, b
    if id_a == id_b:
        raise PromptlabError(f"compare {name_a} with another version, not itself")
    names = (name_a, name_b)
    run_of = functools.cache(run_of)  # a run on several models is several strata: read once
    look = interim(planned_units) if sequential else FINAL
    strata = split_strata(samples.version_strata(id_a, id_b, since))
    for arm_name, results in ((name_a, strata.results_a), (name_b, strata.results_b)):
        if not results:
            raise PromptlabError(f"no results of {arm_name}" + since_text(since))
    notes: list[str] = []
    within: dict[str, list[MetricComparison]] = {}
    if strata.shared:
        rows, arms, shared = _stratified(
            samples, strata, run_of, (a, b), look, keep_shared, (notes, within)
        )
    else:
        notes.append(check_poolable(strata.left_out, run_of, names))
        rows, arms, shared = _pooled(samples, (a, b), since, look, keep_shared, notes)
    metrics = [m for m in reads.version_metrics(None, since) if m.prompt_version_id in (id_a, id_b)]
    family = default_family(sorted({r.metric for r in rows if r.metric.startswith(SCORE_PREFIX)}))
    return Comparison(
        "",
        "versions",
        name_a,
        False,
        holm_verdicts(rows, family=family.metrics),
        None,
        metrics,
        method=METHODS[look.kind],
        arms=arms,
        planned_units=look.planned_units,
        family=family,
        family_size=family_size(rows, family.metrics),
        shared_units=shared,
        notes=notes,
        scope=strata.describe() if strata.shared else "",
        strata=within if len(within) > 1 else {},
    )


def _pooled(
    samples: SampleReads,
    versions: tuple[tuple[str, str], tuple[str, str]],
    since: datetime | None,
    look: Look,
    keep_shared: bool,
    notes: list[str],
) -> tuple[list[MetricComparison], dict[str, tuple[int, int]], int]:
    """Every result of each version in one arm, per unit (when no run holds both and
    their runs may be pooled): the rows, units and requests per arm, and shared units."""
    (id_a, name_a), (id_b, name_b) = versions
    arm_a = samples.version_arm(id_a, name_a, since)
    arm_b = samples.version_arm(id_b, name_b, since)
    arm_a, arm_b, shared = apart(arm_a, arm_b, keep_shared, notes)
    return compare_arms(arm_a, arm_b, look=look), arms_of(arm_a, arm_b), shared


def _stratified(
    samples: SampleReads,
    strata: Strata,
    run_of: Callable[[str], RunRecord],
    versions: tuple[tuple[str, str], tuple[str, str]],
    look: Look,
    keep_shared: bool,
    found_out: tuple[list[str], dict[str, list[MetricComparison]]],
) -> tuple[list[MetricComparison], dict[str, tuple[int, int]], int]:
    """The versions compared within each stratum holding both and combined over them:
    the rows, units and requests per arm summed over the strata, and shared units; the
    runs left out are noted, and each stratum's rows kept by "RUN on MODEL" (`found_out`:
    the notes and the strata's rows, filled here)."""
    notes, within = found_out
    names = (versions[0][1], versions[1][1])
    arms = {name: (0, 0) for name in names}
    shared = 0
    per_stratum: list[list[MetricComparison]] = []
    for stratum in strata.shared:
        rows, (arm_a, arm_b), found = _within(
            samples, run_of(stratum.run_id), stratum, versions, look, keep_shared, notes
        )
        per_stratum.append(rows)
        within[f"{stratum.run_id} on {stratum.model_name}"] = rows
        shared += found
        for arm in (arm_a, arm_b):
            units, requests = arms[arm.name]
            arms[arm.name] = (units + arm.units, requests + arm.requests)
    notes += strata.left_out_notes(names)
    rows = per_stratum[0] if len(per_stratum) == 1 else combine(per_stratum, look)
    return rows, arms, shared


def _within(
    samples: SampleReads,
    run: RunRecord,
    stratum: VersionStratum,
    versions: tuple[tuple[str, str], tuple[str, str]],
    look: Look,
    keep_shared: bool,
    notes: list[str],
) -> tuple[list[MetricComparison], tuple[ArmSample, ArmSample], int]:
    """The versions compared inside one stratum: paired over the same inputs when the
    run sent every row to one variant of each, per unit otherwise."""

    (id_a, name_a), (id_b, name_b) = versions
    one_each = len(stratum.variants_a) == 1 and len(stratum.variants_b) == 1
    if run_mode(run) == "all" and one_each:
        va, vb = stratum.variants_a[0], stratum.variants_b[0]
        replay, user, by = clustering(run)
        arm_a = replace(samples.run_arm(run.run_id, va, True, replay, user), name=name_a)
        arm_b = replace(samples.run_arm(run.run_id, vb, True, replay, user), name=name_b)
        pairs = samples.paired(run.run_id, va, vb, replay, user)
        return compare_paired(pairs, arm_a, arm_b, look=look, by=by), (arm_a, arm_b), 0
    arm_a = samples.version_arm(id_a, name_a, None, within=stratum)
    arm_b = samples.version_arm(id_b, name_b, None, within=stratum)
    arm_a, arm_b, found = apart(arm_a, arm_b, keep_shared, notes)
    return compare_arms(arm_a, arm_b, look=look), (arm_a, arm_b), found


def combine(per_stratum: Sequence[list[MetricComparison]], look: Look) -> list[MetricComparison]:
    """One row per metric from each stratum's rows: the inverse-variance weighted effect
    of the strata that could be tested (a stratum with too few units or no data is left
    out of that metric), tested at `look`."""
    by_metric: dict[str, list[MetricComparison]] = {}
    for rows_ in per_stratum:
        for row in rows_:
            by_metric.setdefault(row.metric, []).append(row)
    combined = []
    for matching in by_metric.values():
        usable = [r for r in matching if _usable(r)]
        summed = _summed(matching[0], matching)
        if not usable:
            combined.append(_untested(summed, matching))
            continue
        weights = [1 / (r.standard_error or math.inf) ** 2 for r in usable]
        total = sum(weights)
        effect = sum(w * (r.effect or 0.0) for w, r in zip(weights, usable, strict=True)) / total
        method = f"stratified over {len(usable)} run{'s' if len(usable) != 1 else ''}"
        summed = _weighted_values(summed, usable, weights)
        combined.append(decided(summed, Estimate(effect, 1 / total), method, look))
    return combined


def _weighted_values(
    summed: MetricComparison, usable: Sequence[MetricComparison], weights: Sequence[float]
) -> MetricComparison:
    """Each version's value over the strata weighted as the effect is, so variant -
    control is the combined delta (units-weighted values are a pooled view, and can
    point the other way); the summed row as it is when a stratum lacks a value."""
    pairs = [(r.control_value, r.variant_value) for r in usable]
    if any(c is None or v is None for c, v in pairs):
        return summed
    total = sum(weights)
    control = sum(w * (c or 0.0) for w, (c, _) in zip(weights, pairs, strict=True)) / total
    variant = sum(w * (v or 0.0) for w, (_, v) in zip(weights, pairs, strict=True)) / total
    return replace(summed, control_value=control, variant_value=variant)


def _usable(row: MetricComparison) -> bool:
    se = row.standard_error
    return (
        row.effect is not None
        and row.verdict != Verdict.TOO_FEW
        and row.test != NO_DATA
        and se is not None
        and math.isfinite(se)
        and se > 0
    )


def _summed(template: MetricComparison, rows: Sequence[MetricComparison]) -> Any:
    """The metric's row before testing: units and requests summed over the strata,
    values averaged weighted by units."""

    def mean(values: list[tuple[float | None, int]]) -> float | None:
        known = [(v, n) for v, n in values if v is not None and n > 0]
        weight = sum(n for _, n in known)
        return sum(v * n for v, n in known) / weight if weight else None

    return replace(
        template,
        control_value=mean([(r.control_value, r.n_control) for r in rows]),
        variant_value=mean([(r.variant_value, r.n_variant) for r in rows]),
        n_control=sum(r.n_control for r in rows),
        n_variant=sum(r.n_variant for r in rows),
        requests_control=sum(r.requests_control for r in rows),
        requests_variant=sum(r.requests_variant for r in rows),
        effect=None,
        interval=None,
        p_value=1.0,
        test=NO_DATA,
        standard_error=None,
        control_interval=None,
        variant_interval=None,
        reason="",
        chance_to_beat=None,
        expected_loss=None,
        verdict=Verdict.UNDECIDED,
    )


def _untested(summed: MetricComparison, rows: Sequence[MetricComparison]) -> MetricComparison:
    few = [r for r in rows if r.verdict == Verdict.TOO_FEW]
    if not few:
        return summed
    fewest = max(min(r.n_control, r.n_variant) for r in few)
    if fewest >= minimum_units(summed.analysed_by):
        # Each stratum has units enough, but a latency tail too thin: keep its reason.
        return replace(summed, verdict=Verdict.TOO_FEW, test=few[0].test, reason=few[0].reason)
    reason = too_few(fewest, summed.analysed_by) + " in every run holding both versions"
    return replace(summed, verdict=Verdict.TOO_FEW, test=few[0].test, reason=reason)
