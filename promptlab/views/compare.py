"""A comparison as plain rows of text: the CLI's `promptlab compare` table and the
Compare page's summary table are the same cells, formatted here once.

Pure formatting (no DuckDB, no Streamlit): values in their metric's unit (a rate as a
percentage, latency in ms), deltas in percentage points or ms, p-values to 3 figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from promptlab.analysis.sequential import DEFAULT_PLANNED_UNITS
from promptlab.analysis.stats import MIN_UNITS_PER_ARM, SRM_MIN_UNITS, Verdict

#: The planned units per arm a comparison of logs or versions is tuned to by default.
PLANNED_UNITS_DEFAULT = DEFAULT_PLANNED_UNITS

if TYPE_CHECKING:
    from promptlab.analysis.compare import Comparison
    from promptlab.analysis.stats import MetricComparison, SrmCheck

#: The summary table's columns, in order (the CLI prints the same ones).
COMPARISON_COLUMNS = ("variant", "metric", "control", "variant value", "delta", "interval",
                      "p", "adj p", "P(beat)", "risk", "method", "verdict", "units",
                      "requests", "why")  # fmt: skip


def interval_level(method: str) -> str:
    """The effect intervals' level by the comparison's method: each look's share of the
    family's 5% (promptlab/analysis/sequential.py)."""
    from promptlab.analysis.compare import ALWAYS_VALID, FINAL_LOOK

    return {ALWAYS_VALID: "99%", FINAL_LOOK: "96%"}.get(method, "95%")


#: A mark per verdict, for the page (the CLI prints the words alone).
VERDICT_ICONS = {Verdict.BETTER: "🟢", Verdict.WORSE: "🔴", Verdict.UNDECIDED: "⚪",
                 Verdict.UNADJUSTED: "🔶", Verdict.TOO_FEW: "⚫"}  # fmt: skip


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
        str(row.verdict),
        f"{row.n_control}/{row.n_variant}",
        f"{row.requests_control}/{row.requests_variant}",
        row.reason,
    )


def summary_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """The comparison as plain rows for a table: the CLI's cells, the verdict with its
    mark (better / worse / not yet distinguishable)."""
    rows = []
    for row in comparison.rows:
        cells = dict(zip(COMPARISON_COLUMNS, comparison_cells(row), strict=True))
        cells["verdict"] = f"{VERDICT_ICONS[row.verdict]} {row.verdict}"
        rows.append(cells)
    return rows


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


def answer_sentences(comparison: Comparison) -> list[str]:
    """One sentence per variant: which metrics are better, worse or undecided, on how many
    units, and how many more units would decide the primary metric (completion rate
    unless the spec declares another)."""
    sentences = []
    for variant in dict.fromkeys(r.variant for r in comparison.rows):
        rows = [r for r in comparison.rows if r.variant == variant]
        by_verdict: dict[Verdict, list[str]] = {}
        for r in rows:
            by_verdict.setdefault(r.verdict, []).append(r.metric)
        parts = [
            f"{label} on {', '.join(by_verdict[v])}"
            for v, label in ((Verdict.BETTER, "better"), (Verdict.WORSE, "worse"))
            if v in by_verdict
        ]
        open_ = [m for v in (Verdict.UNDECIDED, Verdict.UNADJUSTED) for m in by_verdict.get(v, [])]
        if open_:
            parts.append(f"undecided on {', '.join(open_)}")
        if Verdict.TOO_FEW in by_verdict:
            parts.append(f"too few units to judge {', '.join(by_verdict[Verdict.TOO_FEW])}")
        # The primary metric decides: its row says how many more units would settle it.
        main = next((r for r in rows if r.metric == comparison.family.primary), rows[0])
        units = comparison.arms.get(variant, (main.n_variant, main.requests_variant))
        control = comparison.arms.get(comparison.control, (main.n_control, main.requests_control))
        unit_word = {
            "request": "requests",
            "row": "rows",
            "session": "sessions",
            "user": "users",
        }.get(main.analysed_by, "units")
        sentence = (
            f"{variant} against {comparison.control}: {'; '.join(parts) or 'no data'} "
            f"({units[0]} vs {control[0]} {unit_word}, {units[1]} vs {control[1]} requests)"
        )
        if main.chance_to_beat is not None:
            sentence += (
                f"; chance to beat control on {main.metric} {fmt_chance(main.chance_to_beat)}"
                f" (expected loss {fmt_loss(main)})"
            )
        more = more_units_needed(main)
        if main.verdict == Verdict.TOO_FEW:
            fewest = min(main.n_control, main.n_variant)
            short = MIN_UNITS_PER_ARM - fewest
            sentence += f"; {short} more {unit_word} in the smaller arm before any verdict"
        elif more is not None:
            sentence += f"; about {more} more {unit_word} per arm would decide {main.metric}"
        sentences.append(sentence + ".")
    return sentences


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
    """The SRM check's statistic, p-value and units per variant against expected."""
    units = ", ".join(
        f"{name} {srm.observed[name]} (expected {srm.expected[name]:.1f})" for name in srm.observed
    )
    return f"chi-square {srm.statistic:.2f}, p {srm.p_value:.3g}; units: {units}"


def units_needed(comparison: Comparison, mde_pp: float) -> dict[str, Any] | None:
    """Units per arm that detect a change of `mde_pp` points in control's completion rate
    (downward when upward would pass 100%); None when control has finished nothing."""
    from promptlab.analysis.stats import sample_size_two_proportions

    base = next((r.control_value for r in comparison.rows if not r.lower_is_better), None)
    if base is None:
        return None
    change = mde_pp / 100 if base + mde_pp / 100 < 1 else -mde_pp / 100
    # A rate of exactly 0 or 1 has no variance: nudge it inside so the formula holds.
    inside = min(max(base, 1e-9), 1 - 1e-9)
    per_arm = sample_size_two_proportions(inside, change)
    return {"base": base, "change": change, "per_arm": per_arm}


def units_needed_text(needed: dict[str, Any]) -> str:
    """`units_needed`'s answer as a sentence."""
    return (
        f"{needed['per_arm']} units per arm detect a change of "
        f"{needed['change'] * 100:+.1f} pp from control's {needed['base']:.1%} completion "
        "(alpha 0.05, power 80%)"
    )
