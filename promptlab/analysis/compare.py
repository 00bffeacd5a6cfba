"""A comparison's rows: every metric of each variant against control, at the unit that was
randomized, with one method per row and Holm's correction over the table.

What it does, by source (the effects are in promptlab/analysis/units.py, one arm's rows
against another's in promptlab/analysis/arm_rows.py):

- **split runs** (each unit got one variant) and **production logs**: each arm summed
  per unit (the assignment unit, the log's `unit_id`; a row without one is its own
  unit). Completion and CTR by the delta method, latency p50/p90/p99 by the delta
  method on the share of requests below each percentile (units again); an SRM check
  of the units assigned against the shares;
- **all-mode runs** (every row through every variant): paired over (row, repeat) and
  clustered by dataset row, completion and latency by the delta method on the per-row
  difference;
- **versions across runs**: within each run holding both, combined by a stratified
  estimate (promptlab/analysis/strata.py);
- **units seen in both arms** (a split or the logs): left out and counted
  (promptlab/analysis/contamination.py);
- **still collecting** (a run not finished, or `sequential`): the always-valid mSPRT
  tuned to the planned units per arm, at 1% of the family's 5%; the final look (a
  finished run, logs with `--final`) is the fixed-horizon test at the other 4%
  (promptlab/analysis/sequential.py), so looking again does not inflate false positives;
- **CUPED** (`cuped`, production logs with `since`): each unit's rates before `since`
  as a covariate (promptlab/analysis/cuped.py);
- an arm with fewer than MIN_UNITS_PER_ARM units gives "too few units", not a verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from promptlab.analysis.arm_rows import COMPARED_QUANTILES as COMPARED_QUANTILES
from promptlab.analysis.arm_rows import compare_arms, compare_paired, scores_of
from promptlab.analysis.contamination import shared_note, shared_units, without_shared
from promptlab.analysis.sequential import FINAL, FINAL_ALPHA, Look, interim
from promptlab.analysis.stats import (
    MetricComparison,
    SrmCheck,
    Verdict,
    family_size,
    holm_verdicts,
    srm_check,
)
from promptlab.errors import PromptlabError
from promptlab.records import LogMetricsRow, MetricsRow, RunRecord
from promptlab.records.family import MetricFamily, declared, default_family, family_of
from promptlab.records.states import RunStatus
from promptlab.records.unit_samples import COMPLETION, CTR, ArmSample

if TYPE_CHECKING:
    from promptlab.store.metrics import MetricsReads
    from promptlab.store.unit_samples import SampleReads

__all__ = ["COMPLETION", "CTR", "Comparison", "compare_arms", "compare_logs", "compare_run"]

FIXED_HORIZON = "fixed horizon"
ALWAYS_VALID = "always valid (mSPRT)"
FINAL_LOOK = f"fixed horizon, final look ({FINAL_ALPHA:.0%} of 5%)"
METHODS = {"fixed": FIXED_HORIZON, "interim": ALWAYS_VALID, "final": FINAL_LOOK}


@dataclass(frozen=True)
class Comparison:
    """Every variant of a run against its control: one row per (variant, metric)."""

    run_id: str
    mode: str
    control: str
    #: True when rows pair the same inputs (an all-mode run).
    paired: bool
    rows: list[MetricComparison]
    #: The sample-ratio check of a split run's assignments; None for all-mode runs.
    srm: SrmCheck | None
    metrics: list[MetricsRow]
    #: Production log totals of both versions (control first) for a `logs` comparison.
    logs: list[LogMetricsRow] = field(default_factory=list)
    #: FIXED_HORIZON, ALWAYS_VALID while the data is still arriving, or FINAL_LOOK.
    method: str = FIXED_HORIZON
    #: Units per arm the always-valid test is tuned to (None: not a sequential look).
    planned_units: int | None = None
    #: The metric that decides and the guardrails: Holm's fixed family (family.py).
    family: MetricFamily = field(default_factory=default_family)
    #: How many tests Holm adjusted over (the family times the variants compared).
    family_size: int = 0
    #: Units and requests per arm (control first), as analysed.
    arms: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Units seen under both arms (promptlab/analysis/contamination.py), left out
    #: unless the comparison was asked to keep them.
    shared_units: int = 0
    #: One-line warnings and what was done about them: shared units, runs left out or
    #: pooled (promptlab/analysis/strata.py).
    notes: list[str] = field(default_factory=list)
    #: What two versions across runs were compared within (the runs holding both).
    scope: str = ""
    #: Two versions combined over several runs: each stratum's own rows, by "RUN on
    #: MODEL" (promptlab/analysis/strata.py); empty for any other comparison.
    strata: dict[str, list[MetricComparison]] = field(default_factory=dict)

    @property
    def sequential(self) -> bool:
        return self.method == ALWAYS_VALID

    def verdicts(self) -> dict[tuple[str, str], Verdict]:
        return {(r.variant, r.metric): r.verdict for r in self.rows}


def run_mode(run: RunRecord) -> str:
    """`split` or `all`: how the run's rows met its variants (a plain run is `all`)."""
    return str(declared(run.spec, "mode") or "all")


def control_of(run: RunRecord, variants: list[str]) -> str:
    experiment = run.spec.get("experiment")
    if isinstance(experiment, dict):
        for variant in experiment.get("variants", []):
            if isinstance(variant, dict) and variant.get("control") and variant["name"] in variants:
                return str(variant["name"])
    return variants[0]


def compare_run(
    reads: MetricsReads,
    samples: SampleReads,
    run: RunRecord,
    metrics: list[MetricsRow],
    variant_a: str | None = None,
    variant_b: str | None = None,
    sequential: bool | None = None,
    planned_units: int | None = None,
    keep_shared: bool = False,
) -> Comparison:
    """Each variant of the run (or `variant_b`) against control (or `variant_a`);
    `sequential` defaults to True while the run is not finished, tuned to
    `planned_units` per arm (default: what the run plans); else the final look. Units
    a split run assigned to both arms are left out unless `keep_shared`."""
    control, others = _control_and_others(run, metrics, variant_a, variant_b)
    if sequential is None:
        sequential = not RunStatus(run.status).is_final
    mode = run_mode(run)
    # A split's units per variant: what its plan gives each arm, and its SRM check.
    assigned = reads.assigned_units(run.run_id) if mode == "split" else {}
    look = interim(planned_units or _planned_units(run, mode, assigned)) if sequential else FINAL
    paired = mode == "all"
    notes: list[str] = []
    rows, arms, shared = _against_control(
        samples, run, (control, others), paired, look, keep_shared, notes
    )
    srm = _srm(run, assigned) if mode == "split" else None
    family = family_of(run.spec)
    decided = holm_verdicts(rows, family=family.metrics, variants=len(others))
    size = family_size(rows, family.metrics, len(others))
    if variant_b is not None:
        decided = [r for r in decided if r.variant == variant_b]
        arms = {name: arms[name] for name in (control, variant_b)}
    return Comparison(
        run.run_id,
        mode,
        control,
        paired,
        decided,
        srm,
        metrics,
        method=METHODS[look.kind],
        arms=arms,
        planned_units=look.planned_units,
        family=family,
        family_size=size,
        shared_units=shared,
        notes=notes,
    )


def clustering(run: RunRecord) -> tuple[bool, str | None, str]:
    """How an all-mode run's pairs are clustered: whether it replays a conversation log,
    the log's user column (`unit_column`), and the cluster (`row`, `session`, `user`)."""
    # A replayed conversation log's turns are clustered by session (or by the log's
    # user column: a user's sessions are not independent either).
    replay = run.spec.get("history") is not None
    user = run.spec.get("unit_column") if replay else None
    return replay, user, ("user" if user else "session") if replay else "row"


def _against_control(
    samples: SampleReads,
    run: RunRecord,
    variants: tuple[str, list[str]],
    paired: bool,
    look: Look,
    keep_shared: bool,
    notes: list[str],
) -> tuple[list[MetricComparison], dict[str, tuple[int, int]], int]:
    """Each other variant's rows against control (paired over the same inputs, or per
    unit with the units both arms hold left out unless `keep_shared`), the units and
    requests per arm, and the most units any pair of arms shared."""
    control, others = variants
    replay, user, by = clustering(run) if paired else (False, None, "row")
    rows: list[MetricComparison] = []
    shared = 0
    control_arm = samples.run_arm(run.run_id, control, paired, replay, user)
    arms = {control: (control_arm.units, control_arm.requests)}
    for other in others:
        arm = samples.run_arm(run.run_id, other, paired, replay, user)
        arms[other] = (arm.units, arm.requests)
        if paired:
            pairs = samples.paired(run.run_id, control, other, replay, user)
            rows += compare_paired(pairs, control_arm, arm, look=look, by=by)
            continue
        base, arm, found = apart(control_arm, arm, keep_shared, notes)
        shared = max(shared, found)
        rows += compare_arms(base, arm, look=look)
    return rows, arms, shared


def _control_and_others(
    run: RunRecord, metrics: list[MetricsRow], variant_a: str | None, variant_b: str | None
) -> tuple[str, list[str]]:
    """The control (`variant_a`, else the run's) and every other variant, the names
    given checked against the run's."""
    names = [m.variant or "" for m in metrics]
    for given in (variant_a, variant_b):
        if given is not None and given not in names:
            raise PromptlabError(
                f"run {run.run_id} has no variant {given!r} (variants: {', '.join(names)})"
            )
    if len(names) < 2:
        raise PromptlabError(f"run {run.run_id} has one variant: nothing to compare")
    control = variant_a or control_of(run, names)
    if variant_b == control:
        raise PromptlabError(f"compare {control!r} with another variant, not itself")
    # Every variant is tested, whichever is shown: the family does not move with the view.
    return control, [n for n in names if n != control]


def variants_of_versions(
    run_id: str, metrics: list[MetricsRow], versions: tuple[tuple[str, str], tuple[str, str]]
) -> tuple[str, str]:
    """The run's variant of each version (version id, label); PromptlabError unless each
    version is exactly one variant of the run."""
    names = []
    for version_id, label in versions:
        found = [m.variant or "" for m in metrics if m.prompt_version_id == version_id]
        if len(found) != 1:
            what = "no variant" if not found else f"variants {', '.join(found)}"
            raise PromptlabError(
                f"run {run_id} has {what} of {label}: compare its variants by name "
                f"(promptlab compare --run {run_id} A B)"
            )
        names.append(found[0])
    return names[0], names[1]


def apart(
    a: ArmSample, b: ArmSample, keep_shared: bool, notes: list[str]
) -> tuple[ArmSample, ArmSample, int]:
    """The arms without the units both hold (unless `keep_shared`), and how many there
    were; a note says so."""
    if keep_shared:
        found = shared_units(a, b)
    else:
        a, b, found = without_shared(a, b)
    if found:
        notes.append(shared_note(found, (a.name, b.name), kept=keep_shared))
    return a, b, found


def _planned_units(run: RunRecord, mode: str, assigned: dict[str, int]) -> int | None:
    """Units per arm the run plans: what its spec or experiment declares
    (`planned_units:`), else a split's `assigned` units (every row is assigned when the
    run is planned), else its rows (items over variants and repeats); None for a
    replayed log, whose sessions are counted as they come."""
    planned = declared(run.spec, "planned_units")
    if isinstance(planned, int) and planned > 0:
        return planned
    if mode == "split":
        return max(1, sum(assigned.values()) // len(assigned)) if assigned else None
    variants = run.spec.get("variants")
    if run.spec.get("history") is not None or not isinstance(variants, list) or not variants:
        return None
    repeats = int(run.spec.get("repeats") or 1)
    return max(1, run.total_items // (len(variants) * max(1, repeats)))


def compare_logs(
    reads: MetricsReads,
    samples: SampleReads,
    a: tuple[str, str],
    b: tuple[str, str],
    *,
    since: datetime | None = None,
    sequential: bool = True,
    cuped: bool = False,
    planned_units: int | None = None,
    keep_shared: bool = False,
) -> Comparison:
    """Version B against version A, each given as (version id, label), from production
    logs; independent arms per unit. `sequential`: an interim look tuned to
    `planned_units` per arm; else the final look. `cuped` (with `since` only) adjusts
    rates by each unit's history before `since`. Units with lines of both versions are
    left out unless `keep_shared`. (Versions across runs: promptlab/analysis/strata.py.)"""
    (id_a, name_a), (id_b, name_b) = a, b
    if id_a == id_b:
        raise PromptlabError(f"compare {name_a} with another version, not itself")
    if cuped and since is None:
        raise PromptlabError(
            "CUPED needs production logs and --since (the pre-period is each unit's logs before it)"
        )
    look = interim(planned_units) if sequential else FINAL
    totals = _log_totals(reads, (a, b), since)
    pre_before = _pre_period_end(samples, [id_a, id_b], since) if cuped else None
    notes: list[str] = []
    arm_a, arm_b, shared = apart(
        samples.log_arm(id_a, name_a, since, pre_before),
        samples.log_arm(id_b, name_b, since, pre_before),
        keep_shared,
        notes,
    )
    rows = compare_arms(arm_a, arm_b, look=look, cuped=cuped)
    family = default_family(scores_of(arm_a, arm_b))
    return Comparison(
        "",
        "logs",
        name_a,
        False,
        holm_verdicts(rows, family=family.metrics),
        None,
        [],
        [totals[id_a], totals[id_b]],
        method=METHODS[look.kind],
        arms=arms_of(arm_a, arm_b),
        planned_units=look.planned_units,
        family=family,
        family_size=family_size(rows, family.metrics),
        shared_units=shared,
        notes=notes,
    )


def _log_totals(
    reads: MetricsReads, versions: tuple[tuple[str, str], ...], since: datetime | None
) -> dict[str, LogMetricsRow]:
    """Production log totals by version id; PromptlabError names a version without any."""
    totals = {r.prompt_version_id: r for r in reads.log_metrics(None, since)}
    for version_id, name in versions:
        if version_id not in totals:
            raise PromptlabError(f"no production logs for {name}" + since_text(since))
    return totals


def _pre_period_end(
    samples: SampleReads, version_ids: list[str], since: datetime | None
) -> datetime | None:
    """Where CUPED's pre-period ends: at `since`, or earlier when either version served
    anyone before it (None without `since`)."""
    if since is None:
        return None
    # The pre-period ends before either version served anyone: a unit's history
    # must not already hold the treatment (that would pull the effect to 0).
    first = samples.first_log_time(version_ids)
    return min(since, first) if first is not None else since


def arms_of(a: ArmSample, b: ArmSample) -> dict[str, tuple[int, int]]:
    return {a.name: (a.units, a.requests), b.name: (b.units, b.requests)}


def since_text(since: datetime | None) -> str:
    return f" since {since.isoformat()}" if since is not None else ""


def _srm(run: RunRecord, assigned: dict[str, int]) -> SrmCheck | None:
    from promptlab.experiments import config_from_mapping, expected_shares

    experiment = run.spec.get("experiment")
    if not isinstance(experiment, dict):
        return None
    config = config_from_mapping(experiment, source=f"run {run.run_id}: experiment")
    return srm_check(assigned, expected_shares(config))


_SINCE = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`7d`, `24h`, `30m`, `2w` before now, or a date / time (`2026-11-01`, ISO 8601;
    UTC unless it says otherwise)."""
    value = text.strip()
    match = _SINCE.match(value)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        try:
            return (now or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: amount})
        except OverflowError:
            raise PromptlabError(f"--since: {text!r} reaches before year 1") from None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise PromptlabError(
            f"--since: expected an age like 7d, 24h, 30m, 2w or a date like 2026-11-01, "
            f"got {text!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
