"""A comparison as plain rows of text: the CLI's `promptlab compare` table and the
Compare page's summary table are the same cells, formatted here once.

Pure formatting (no DuckDB, no Streamlit): values in their metric's unit (a rate as a
percentage, latency in ms), deltas in percentage points or ms, p-values to 3 figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from promptlab.analysis.stats import Verdict

if TYPE_CHECKING:
    from promptlab.analysis.compare import Comparison
    from promptlab.analysis.stats import MetricComparison, SrmCheck

#: The summary table's columns, in order (the CLI prints the same ones).
COMPARISON_COLUMNS = ("variant", "metric", "control", "variant value", "delta", "95% interval",
                      "p", "adj p", "test", "verdict", "n")  # fmt: skip
#: A mark per verdict, for the page (the CLI prints the words alone).
VERDICT_ICONS = {Verdict.BETTER: "🟢", Verdict.WORSE: "🔴", Verdict.UNDECIDED: "⚪"}


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
        row.test,
        str(row.verdict),
        f"{row.n_control}/{row.n_variant}",
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
