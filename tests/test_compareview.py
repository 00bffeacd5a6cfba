"""A comparison as rows of text: the cells the CLI prints and the Compare page shows."""

from __future__ import annotations

from promptlab.analysis.compare import Comparison
from promptlab.analysis.stats import Interval, MetricComparison, Verdict
from promptlab.views.compare import (
    COMPARISON_COLUMNS,
    comparison_cells,
    summary_rows,
    units_needed,
    units_needed_text,
)


def rows() -> list[MetricComparison]:
    return [
        MetricComparison("completion rate", "b", "a", 0.8, 0.9, 100, 90, 0.1,
                         Interval(0.02, 0.18), 0.00001, "two-proportion z", False, 0.00002,
                         Verdict.BETTER),
        MetricComparison("latency p90", "b", "a", 1000.0, 1250.4, 80, 81, 250.4,
                         Interval(-20.0, 500.0), 0.2, "bootstrap + Mann-Whitney U", True, 0.4,
                         Verdict.UNDECIDED),
    ]  # fmt: skip


def test_cells_are_in_their_units_with_intervals_and_p_values() -> None:
    completion, latency = (comparison_cells(r) for r in rows())
    assert dict(zip(COMPARISON_COLUMNS, completion, strict=True)) == {
        "variant": "b", "metric": "completion rate", "control": "80.0%",
        "variant value": "90.0%", "delta": "+10.0 pp", "95% interval": "+2.0 pp .. +18.0 pp",
        "p": "<0.0001", "adj p": "<0.0001", "test": "two-proportion z", "verdict": "better",
        "n": "100/90",
    }  # fmt: skip
    assert latency[2:6] == ("1000", "1250", "+250 ms", "-20 ms .. +500 ms")


def test_summary_rows_mark_the_verdict_and_sample_size_reads_as_a_sentence() -> None:
    comparison = Comparison("run_x", "split", "a", False, rows(), None, [])
    table = summary_rows(comparison)
    assert [r["verdict"] for r in table] == ["🟢 better", "⚪ not yet distinguishable"]
    needed = units_needed(comparison, 5.0)
    assert needed is not None and needed["base"] == 0.8 and needed["change"] == 0.05
    assert units_needed_text(needed).startswith(f"{needed['per_arm']} units per arm")
