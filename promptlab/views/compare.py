"""A comparison as plain rows of text: the CLI's `promptlab compare` table and the
Compare page's summary table are the same cells, formatted here once.

Pure formatting (no DuckDB, no Streamlit): values in their metric's unit (a rate as a
percentage, latency in ms), deltas in percentage points or ms, p-values to 3 figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from promptlab.analysis.sequential import DEFAULT_PLANNED_UNITS
from promptlab.analysis.stats import SRM_MIN_UNITS, Verdict, minimum_units

#: The planned units per arm a comparison of logs or versions is tuned to by default.
PLANNED_UNITS_DEFAULT = DEFAULT_PLANNED_UNITS

if TYPE_CHECKING:
    from promptlab.analysis.compare import Comparison
    from promptlab.analysis.stats import MetricComparison, SrmCheck

#: The summary table's columns, in order (the CLI prints the same ones).
COMPARISON_COLUMNS = (
    "variant",
    "metric",
    "control",
    "variant value",
    "delta",
    "interval",
    "p",
    "adj p",
    "P(beat)",
    "risk",
    "method",
    "verdict",
    "units",
    "requests",
    "why",
)


def interval_level(method: str) -> str:
    """The effect intervals' level by the comparison's method: each look's share of the
    family's 5% (promptlab/analysis/sequential.py)."""
    from promptlab.analysis.compare import ALWAYS_VALID, FINAL_LOOK

    return {ALWAYS_VALID: "99%", FINAL_LOOK: "96%"}.get(method, "95%")


def cache_note(rows: Sequence[Any]) -> str | None:
    """What the latencies leave out: results answered from the response cache (they
    were not sent, so they have no latency of their own); None when there are none."""
    hits = sum(getattr(r, "cache_hits", 0) for r in rows)
    if not hits:
        return None
    answers = "answer from the cache is" if hits == 1 else "answers from the cache are"
    return f"{hits:,} {answers} left out of latency (not sent, cost $0)"


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def fmt_p(value: float | None) -> str:
    if value is None:
        return "-"
    return "<0.0001" if value < 0.0001 else f"{value:.3g}"  # --json keeps the exact value


def fmt_value(row: MetricComparison, value: float | None) -> str:
    """A metric's value in its unit: ms for latency, a percentage for a rate."""
    return fmt_ms(value) if row.lower_is_better else fmt_pct(value)


def fmt_delta(row: MetricComparison, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:+.0f} ms" if row.lower_is_better else f"{value * 100:+.1f} pp"


def fmt_chance(value: float | None) -> str:
    """A chance to beat control as a percentage; the tails as <0.1% and >99.9%."""
    if value is None:
        return "-"
    return ">99.9%" if value > 0.999 else "<0.1%" if value < 0.001 else f"{value:.1%}"


def fmt_loss(row: MetricComparison) -> str:
    """The expected loss of choosing the variant, unsigned, in the metric's unit."""
    if row.expected_loss is None:
        return "-"
    if row.lower_is_better:
        return f"{row.expected_loss:.0f} ms"
    return f"{row.expected_loss * 100:.2f} pp"


def verdict_text(row: MetricComparison) -> str:
    """The row's verdict in words. "Too few" says too few of what, as its reason does
    (`too few units`, `too few rows`, `too few requests beyond p99`): the reason's words
    before its figures, so the verdict and the why column never disagree."""
    if row.verdict == Verdict.TOO_FEW and row.reason.startswith("too few "):
        return row.reason.split(" (", 1)[0]
    return str(row.verdict)


def comparison_cells(row: MetricComparison) -> tuple[str, ...]:
    """One comparison row as text, in COMPARISON_COLUMNS order."""
    interval = "-"
    if row.interval is not None:
        interval = f"{fmt_delta(row, row.interval.low)} .. {fmt_delta(row, row.interval.high)}"
    return (
        row.variant,
        row.metric,
        fmt_value(row, row.control_value),
        fmt_value(row, row.variant_value),
        fmt_delta(row, row.effect),
        interval,
        fmt_p(row.p_value),
        fmt_p(row.adjusted_p),
        fmt_chance(row.chance_to_beat),
        fmt_loss(row),
        row.test,
        verdict_text(row),
        f"{row.n_control}/{row.n_variant}",
        f"{row.requests_control}/{row.requests_variant}",
        row.reason,
    )


def summary_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """The comparison as plain rows for a table: the CLI's cells, the verdict in words
    (no emoji mark: a machine without an emoji font showed empty boxes)."""
    rows = []
    for row in comparison.rows:
        cells = dict(zip(COMPARISON_COLUMNS, comparison_cells(row), strict=True))
        cells["verdict"] = verdict_text(row)
        rows.append(cells)
    return rows


#: The columns of a stratified comparison's rows within each run.
STRATUM_COLUMNS = (
    "run",
    "metric",
    "control",
    "variant value",
    "delta",
    "interval",
    "units",
    "requests",
    "method",
)


def strata_note(comparison: Comparison) -> str | None:
    """The one line a stratified comparison shows between its combined rows and each
    run's own (None when the comparison is not combined over runs)."""
    if not comparison.strata:
        return None
    return (
        f"Stratified over {len(comparison.strata)} runs: each row above is the combined "
        "estimate, every run's delta weighted by its precision and each version's value "
        "weighted the same way, so variant - control is the delta (the versions' pooled "
        "values can differ, even in sign). Each run's own values and delta:"
    )


def stratum_rows(comparison: Comparison) -> list[dict[str, str]]:
    """Each run's own rows of a stratified comparison, metric by metric in the combined
    table's order, in the CLI's cells (no p: the combined row is the test)."""
    order = {row.metric: index for index, row in enumerate(comparison.rows)}
    found = [
        (order.get(row.metric, len(order)), index, label, row)
        for index, (label, rows) in enumerate(comparison.strata.items())
        for row in rows
    ]
    table = []
    for _, _, label, row in sorted(found, key=lambda f: (f[0], f[1])):
        cells = dict(zip(COMPARISON_COLUMNS, comparison_cells(row), strict=True))
        table.append({"run": label, **{c: cells[c] for c in STRATUM_COLUMNS[1:]}})
    return table


def srm_verdict(srm: SrmCheck) -> str:
    """The SRM check in one line: a mismatch, cannot judge yet, or passed."""
    if srm.mismatch:
        return (
            f"sample ratio mismatch: {srm_figures(srm)}. The split did not follow the "
            "weights: fix the assignment before trusting this comparison."
        )
    if not srm.judged:
        return f"cannot judge yet: an arm has fewer than {SRM_MIN_UNITS} units ({srm_figures(srm)})"
    return f"passed ({srm_figures(srm)})"


#: What a comparison's units are called, by what it was analysed by.
UNIT_WORDS = {"request": "requests", "row": "rows", "session": "sessions", "user": "users"}


def unit_word(analysed_by: str) -> str:
    return UNIT_WORDS.get(analysed_by, "units")


@dataclass(frozen=True)
class UnitsPerArm:
    """Units per arm a verdict needs, against the smaller arm's now: the one figure the
    answer sentence and the sample-size line both state, in the same terms (units per
    arm in all, and how many more)."""

    per_arm: int
    #: Units in the smaller arm now (the smallest, over several variants).
    have: int
    word: str = "units"

    @property
    def more(self) -> int:
        return max(0, self.per_arm - self.have)

    def text(self) -> str:
        """`N units per arm`: the figure in all, as both sentences lead with it."""
        return f"{self.per_arm} {self.word} per arm"

    def more_text(self) -> str:
        """How many more that is than the smaller arm has now."""
        if not self.more:
            return f"the smaller arm has {self.have} already"
        return f"{self.more} more than the smaller arm's {self.have}"


def answer_sentences(comparison: Comparison) -> list[str]:
    """One sentence per variant: which metrics are better, worse or undecided, on how many
    units, and how many units per arm would decide the primary metric (completion rate
    unless the spec declares another)."""
    sentences = []
    for variant in dict.fromkeys(r.variant for r in comparison.rows):
        rows = [r for r in comparison.rows if r.variant == variant]
        # The primary metric decides: its row says how many more units would settle it.
        main = next((r for r in rows if r.metric == comparison.family.primary), rows[0])
        units = comparison.arms.get(variant, (main.n_variant, main.requests_variant))
        control = comparison.arms.get(comparison.control, (main.n_control, main.requests_control))
        word = unit_word(main.analysed_by)
        sentence = (
            f"{variant} against {comparison.control}: {verdicts_text(rows)} "
            f"({units[0]} vs {control[0]} {word}, {units[1]} vs {control[1]} requests)"
        )
        if main.chance_to_beat is not None:
            sentence += (
                f"; chance to beat control on {main.metric} {fmt_chance(main.chance_to_beat)}"
                f" (expected loss {fmt_loss(main)})"
            )
        sentences.append(sentence + to_decide_text(main) + ".")
    return sentences


def verdicts_text(rows: Sequence[MetricComparison]) -> str:
    """One variant's metrics by verdict: `better on ...; undecided on ...; too few units
    to judge ...` ("too few" of what, as each row's verdict says)."""
    by_verdict: dict[str, list[str]] = {}
    for r in rows:
        by_verdict.setdefault(verdict_text(r), []).append(r.metric)
    parts = [
        f"{label} on {', '.join(by_verdict[v])}"
        for v, label in ((Verdict.BETTER, "better"), (Verdict.WORSE, "worse"))
        if v in by_verdict
    ]
    open_ = [m for v in (Verdict.UNDECIDED, Verdict.UNADJUSTED) for m in by_verdict.get(v, [])]
    if open_:
        parts.append(f"undecided on {', '.join(open_)}")
    few = dict.fromkeys(verdict_text(r) for r in rows if r.verdict == Verdict.TOO_FEW)
    parts += [f"{label} to judge {', '.join(by_verdict[label])}" for label in few]
    return "; ".join(parts) or "no data"


def to_decide_text(main: MetricComparison) -> str:
    """What the primary metric's row still needs, as the tail of the answer sentence:
    the units per arm before any verdict, or that would decide it at the observed
    effect; empty when it is decided."""
    plan = units_to_decide(main)
    if plan is None:
        return ""
    if main.verdict == Verdict.TOO_FEW:
        if not plan.more:  # units enough, a latency tail too thin: say so, as the row does
            return f"; {verdict_text(main)} for any verdict on {main.metric}"
        return f"; {plan.text()} before any verdict ({plan.more_text()})"
    return (
        f"; about {plan.text()} would decide {main.metric} at its observed "
        f"{fmt_delta(main, main.effect)} ({plan.more_text()})"
    )


def units_to_decide(row: MetricComparison, power: float = 0.8) -> UnitsPerArm | None:
    """Units per arm the row needs: the minimum for any verdict while it has too few,
    else what would find its observed effect (`more_units_needed`); None when decided
    or when there is no effect to find."""
    have = min(row.n_control, row.n_variant)
    word = unit_word(row.analysed_by)
    if row.verdict == Verdict.TOO_FEW:
        return UnitsPerArm(max(have, minimum_units(row.analysed_by)), have, word)
    more = more_units_needed(row, power)
    return None if more is None else UnitsPerArm(have + more, have, word)


def more_units_needed(row: MetricComparison, power: float = 0.8) -> int | None:
    """Units per arm still to collect before the observed effect of an undecided row
    would be found with `power` by a fixed-horizon test (its standard error shrinks as
    one over the square root of units); None for a decided row, or one with no effect."""
    import math
    from statistics import NormalDist

    if row.verdict in (Verdict.BETTER, Verdict.WORSE) or row.interval is None:
        return None
    if (
        row.effect is None
        or not row.effect
        or not math.isfinite(row.interval.high - row.interval.low)
    ):
        return None
    normal = NormalDist()
    se = row.standard_error
    if se is None:  # an interval of the fixed-horizon kind: +- 1.96 se
        se = (row.interval.high - row.interval.low) / (2 * normal.inv_cdf(0.975))
    if not se > 0:
        return None
    units = min(row.n_control, row.n_variant)
    needed = units * (se * (normal.inv_cdf(0.975) + normal.inv_cdf(power)) / abs(row.effect)) ** 2
    return max(0, math.ceil(needed - units))


def srm_figures(srm: SrmCheck) -> str:
    """The SRM check's statistic, p-value and units per variant against expected. They
    are the units the split assigned (every unit of the plan), not those with results so
    far, which the verdict rows count: "assigned" says which, mid-run."""
    units = ", ".join(
        f"{name} {srm.observed[name]} (expected {srm.expected[name]:.1f})" for name in srm.observed
    )
    return f"chi-square {srm.statistic:.2f}, p {srm.p_value:.3g}; units assigned: {units}"


def units_needed(comparison: Comparison, mde_pp: float) -> dict[str, Any] | None:
    """Units per arm that detect a change of `mde_pp` points in control's completion rate
    (downward when upward would pass 100%), with the smaller arm's units now (`have`,
    the smallest over the variants), how many more that is (`more`) and what the units
    are (`unit`); None when control has finished nothing."""
    from promptlab.analysis.stats import sample_size_two_proportions

    base_row = next((r for r in comparison.rows if not r.lower_is_better), None)
    if base_row is None or base_row.control_value is None:
        return None
    base = base_row.control_value
    change = mde_pp / 100 if base + mde_pp / 100 < 1 else -mde_pp / 100
    # A rate of exactly 0 or 1 has no variance: nudge it inside so the formula holds.
    inside = min(max(base, 1e-9), 1 - 1e-9)
    per_arm = sample_size_two_proportions(inside, change)
    same = [r for r in comparison.rows if r.metric == base_row.metric]
    plan = UnitsPerArm(
        per_arm, min(min(r.n_control, r.n_variant) for r in same), unit_word(base_row.analysed_by)
    )
    return {
        "base": base,
        "change": change,
        "per_arm": per_arm,
        "have": plan.have,
        "more": plan.more,
        "unit": plan.word,
    }


def units_needed_text(needed: dict[str, Any]) -> str:
    """`units_needed`'s answer as a sentence, in the answer sentence's terms: units per
    arm in all, and how many more than the smaller arm has."""
    plan = UnitsPerArm(needed["per_arm"], needed.get("have", 0), needed.get("unit", "units"))
    return (
        f"{plan.text()} detect a change of {needed['change'] * 100:+.1f} pp from control's "
        f"{needed['base']:.1%} completion (alpha 0.05, power 80%; {plan.more_text()})"
    )
