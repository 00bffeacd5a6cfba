"""A run's variants against its control: completion and latency percentiles, tested.

`compare_run` reads what it needs through `MetricsReads` (counts from DuckDB, latencies
as NumPy arrays) and leaves the statistics to `promptlab.analysis.stats`. What it does, by run:

- **control**: the experiment's control variant for a run of an experiment, else the
  run's first variant (or the one asked for);
- **split runs** (each unit got one variant): completion by two proportions (Fisher's
  exact when counts are small), latency percentiles by a bootstrap interval on the
  difference and a Mann-Whitney test, and an SRM check of the units assigned against
  the experiment's expected shares;
- **all-mode runs** (every row through every variant): the same effects and intervals,
  with paired p-values over the (row, repeat) pairs: McNemar for completion, Wilcoxon
  signed-rank for latency;
- Holm's correction over every comparison in the table, then a verdict for each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from promptlab.analysis.stats import (
    NO_DATA,
    MetricComparison,
    SrmCheck,
    TestResult,
    Verdict,
    bootstrap_quantile_diff,
    holm_verdicts,
    mann_whitney,
    mcnemar,
    srm_check,
    two_proportions,
    wilcoxon_paired,
)
from promptlab.errors import PromptlabError
from promptlab.records import LogMetricsRow, MetricsRow, RunRecord

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from promptlab.store.metrics import MetricsReads

#: The latency percentiles compared, with their metric names.
COMPARED_QUANTILES = ((0.5, "latency p50"), (0.9, "latency p90"), (0.99, "latency p99"))
COMPLETION = "completion rate"
CTR = "CTR"
#: Bootstrap draws per latency comparison, and the seed that makes a table repeatable.
N_BOOT = 2000
SEED = 12


@dataclass(frozen=True)
class Comparison:
    """Every variant of a run against its control: one row per (variant, metric)."""

    run_id: str
    mode: str
    control: str
    #: True when p-values come from paired tests (an all-mode run).
    paired: bool
    rows: list[MetricComparison]
    #: The sample-ratio check of a split run's assignments; None for all-mode runs.
    srm: SrmCheck | None
    metrics: list[MetricsRow]
    #: Production log totals of both versions (control first) for a `logs` comparison.
    logs: list[LogMetricsRow] = field(default_factory=list)

    def verdicts(self) -> dict[tuple[str, str], Verdict]:
        return {(r.variant, r.metric): r.verdict for r in self.rows}


def run_mode(run: RunRecord) -> str:
    """`split` or `all`: how the run's rows met its variants (a plain run is `all`)."""
    spec = run.spec
    experiment = spec.get("experiment")
    mode = spec.get("mode")
    if mode is None and isinstance(experiment, dict):
        mode = experiment.get("mode")
    return str(mode or "all")


def control_of(run: RunRecord, variants: list[str]) -> str:
    experiment = run.spec.get("experiment")
    if isinstance(experiment, dict):
        for variant in experiment.get("variants", []):
            if isinstance(variant, dict) and variant.get("control") and variant["name"] in variants:
                return str(variant["name"])
    return variants[0]


def compare_run(
    reads: MetricsReads,
    run: RunRecord,
    metrics: list[MetricsRow],
    variant_a: str | None = None,
    variant_b: str | None = None,
) -> Comparison:
    """Each variant of the run (or `variant_b`) against control (or `variant_a`)."""
    names = [m.variant or "" for m in metrics]
    for given in (variant_a, variant_b):
        if given is not None and given not in names:
            raise PromptlabError(
                f"run {run.run_id} has no variant {given!r} (variants: {', '.join(names)})"
            )
    if len(names) < 2:
        raise PromptlabError(f"run {run.run_id} has one variant: nothing to compare")
    control = variant_a or control_of(run, names)
    others = [variant_b] if variant_b is not None else [n for n in names if n != control]
    if control in others:
        raise PromptlabError(f"compare {control!r} with another variant, not itself")
    mode = run_mode(run)
    paired = mode == "all"
    by_name = {m.variant: m for m in metrics}
    rows: list[MetricComparison] = []
    for other in others:
        rows += _compare_pair(reads, run.run_id, by_name[control], by_name[other], paired)
    srm = None
    if mode == "split":
        srm = _srm(reads, run)
    return Comparison(run.run_id, mode, control, paired, holm_verdicts(rows), srm, metrics)


def _compare_pair(
    reads: MetricsReads, run_id: str, a: MetricsRow, b: MetricsRow, paired: bool
) -> list[MetricComparison]:
    name_a, name_b = a.variant or "", b.variant or ""
    rows = [_completion(reads, run_id, a, b, paired)]
    if a.impressions and b.impressions:
        # Clicks are per impression, not per (row, repeat) pair: independent samples.
        rows.append(proportion_row(CTR, name_a, name_b, a.clicks, a.impressions,
                                   b.clicks, b.impressions))  # fmt: skip
    xa, xb = reads.latencies(run_id, name_a), reads.latencies(run_id, name_b)
    test = None
    if paired:
        pa, pb = reads.paired_latencies(run_id, name_a, name_b)
        test = wilcoxon_paired(pa, pb) if pa.size else None
    elif xa.size and xb.size:
        test = mann_whitney(xa, xb)
    return rows + latency_rows(name_a, name_b, xa, xb, test)


def latency_rows(
    name_a: str,
    name_b: str,
    xa: npt.NDArray[np.float64],
    xb: npt.NDArray[np.float64],
    test: TestResult | None,
) -> list[MetricComparison]:
    """Latency p50/p90/p99 of B against A: bootstrap interval, `test`'s p-value."""
    import numpy as np

    rows: list[MetricComparison] = []
    for q, metric in COMPARED_QUANTILES:
        if not xa.size or not xb.size or test is None:
            rows.append(
                MetricComparison(
                    metric,
                    name_b,
                    name_a,
                    None,
                    None,
                    int(xa.size),
                    int(xb.size),
                    None,
                    None,
                    1.0,
                    NO_DATA,
                    lower_is_better=True,
                )  # fmt: skip
            )
            continue
        effect, interval = bootstrap_quantile_diff(xa, xb, q, n_boot=N_BOOT, seed=SEED)
        rows.append(
            MetricComparison(
                metric,
                name_b,
                name_a,
                float(np.quantile(xa, q)),
                float(np.quantile(xb, q)),
                int(xa.size),
                int(xb.size),
                effect,
                interval,
                test.p_value,
                f"bootstrap + {test.test}",
                lower_is_better=True,
            )  # fmt: skip
        )
    return rows


def proportion_row(
    metric: str, name_a: str, name_b: str, s_a: int, n_a: int, s_b: int, n_b: int
) -> MetricComparison:
    """A rate of B against A from independent samples (`two_proportions`)."""
    diff = two_proportions(s_a, n_a, s_b, n_b)
    has_data = n_a > 0 and n_b > 0
    return MetricComparison(
        metric=metric, variant=name_b, control=name_a,
        control_value=s_a / n_a if n_a else None, variant_value=s_b / n_b if n_b else None,
        n_control=n_a, n_variant=n_b, effect=diff.effect if has_data else None,
        interval=diff.interval if has_data else None, p_value=diff.p_value, test=diff.test,
        lower_is_better=False,
    )  # fmt: skip


def compare_versions(
    reads: MetricsReads,
    a: tuple[str, str],
    b: tuple[str, str],
    *,
    logs: bool = False,
    since: datetime | None = None,
) -> Comparison:
    """Version B against version A, each given as (version id, label): from production
    logs (`logs`), else from their results across runs; independent samples.

    Completion and CTR by two proportions, latency p50/p90/p99 by a bootstrap interval
    and a Mann-Whitney test; Holm's correction over the table.
    """
    (id_a, name_a), (id_b, name_b) = a, b
    if id_a == id_b:
        raise PromptlabError(f"compare {name_a} with another version, not itself")
    if logs:
        (log_a, xa), (log_b, xb) = reads.log_sample(id_a, since), reads.log_sample(id_b, since)
        for name, found in ((name_a, log_a), (name_b, log_b)):
            if found is None:
                raise PromptlabError(f"no production logs for {name}" + _since_text(since))
        assert log_a is not None and log_b is not None
        rows = [
            proportion_row(COMPLETION, name_a, name_b, log_a.completed, log_a.completion_known,
                           log_b.completed, log_b.completion_known),
            proportion_row(CTR, name_a, name_b, log_a.clicks, log_a.click_known,
                           log_b.clicks, log_b.click_known),
        ]  # fmt: skip
        test = mann_whitney(xa, xb) if xa.size and xb.size else None
        rows += latency_rows(name_a, name_b, xa, xb, test)
        return Comparison("", "logs", name_a, False, holm_verdicts(rows), None, [],
                          [log_a, log_b])  # fmt: skip
    (fin_a, done_a, imp_a, clk_a), xa = reads.version_sample(id_a, since=since)
    (fin_b, done_b, imp_b, clk_b), xb = reads.version_sample(id_b, since=since)
    for name, finished in ((name_a, fin_a), (name_b, fin_b)):
        if not finished:
            raise PromptlabError(f"no results of {name}" + _since_text(since))
    rows = [proportion_row(COMPLETION, name_a, name_b, done_a, fin_a, done_b, fin_b)]
    if imp_a and imp_b:
        rows.append(proportion_row(CTR, name_a, name_b, clk_a, imp_a, clk_b, imp_b))
    test = mann_whitney(xa, xb) if xa.size and xb.size else None
    rows += latency_rows(name_a, name_b, xa, xb, test)
    metrics = [m for m in reads.version_metrics(None, since) if m.prompt_version_id in (id_a, id_b)]
    return Comparison("", "versions", name_a, False, holm_verdicts(rows), None, metrics)


def _since_text(since: datetime | None) -> str:
    return f" since {since.isoformat()}" if since is not None else ""


def _completion(
    reads: MetricsReads, run_id: str, a: MetricsRow, b: MetricsRow, paired: bool
) -> MetricComparison:
    name_a, name_b = a.variant or "", b.variant or ""
    if paired:
        pairs = reads.paired_completion(run_id, name_a, name_b)
        s_a, n_a, s_b, n_b = pairs.a_completed, pairs.pairs, pairs.b_completed, pairs.pairs
    else:
        s_a, n_a, s_b, n_b = a.completed, a.finished, b.completed, b.finished
    # The interval is Newcombe's for independent samples: for pairs it is conservative.
    diff = two_proportions(s_a, n_a, s_b, n_b)
    p_value, test = diff.p_value, diff.test
    if paired and n_a:
        mc = mcnemar(pairs.only_a, pairs.only_b)
        p_value, test = mc.p_value, mc.test
    has_data = n_a > 0 and n_b > 0
    return MetricComparison(
        metric=COMPLETION, variant=name_b, control=name_a,
        control_value=s_a / n_a if n_a else None, variant_value=s_b / n_b if n_b else None,
        n_control=n_a, n_variant=n_b, effect=diff.effect if has_data else None,
        interval=diff.interval if has_data else None, p_value=p_value, test=test,
        lower_is_better=False,
    )  # fmt: skip


def _srm(reads: MetricsReads, run: RunRecord) -> SrmCheck | None:
    from promptlab.experiments import config_from_mapping, expected_shares

    experiment = run.spec.get("experiment")
    if not isinstance(experiment, dict):
        return None
    config = config_from_mapping(experiment, source=f"run {run.run_id}: experiment")
    return srm_check(reads.assigned_units(run.run_id), expected_shares(config))


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
