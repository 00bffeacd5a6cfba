"""A comparison as rows of text: the cells the CLI prints and the Compare page shows."""

from __future__ import annotations

import math

from promptlab.analysis.compare import Comparison
from promptlab.analysis.stats import Interval, MetricComparison, Verdict, srm_check
from promptlab.views.compare import (
    COMPARISON_COLUMNS,
    answer_sentences,
    comparison_cells,
    more_units_needed,
    srm_verdict,
    summary_rows,
    units_needed,
    units_needed_text,
)


def rows() -> list[MetricComparison]:
    return [
        MetricComparison(
            "completion rate",
            "b",
            "a",
            0.8,
            0.9,
            100,
            90,
            0.1,
            Interval(0.02, 0.18),
            0.00001,
            "two-proportion z",
            False,
            0.00002,
            Verdict.BETTER,
        ),
        MetricComparison(
            "latency p90",
            "b",
            "a",
            1000.0,
            1250.4,
            80,
            81,
            250.4,
            Interval(-20.0, 500.0),
            0.2,
            "bootstrap + Mann-Whitney U",
            True,
            0.4,
            Verdict.UNDECIDED,
        ),
    ]


def test_cells_are_in_their_units_with_intervals_and_p_values() -> None:
    completion, latency = (comparison_cells(r) for r in rows())
    assert dict(zip(COMPARISON_COLUMNS, completion, strict=True)) == {
        "variant": "b",
        "metric": "completion rate",
        "control": "80.0%",
        "variant value": "90.0%",
        "delta": "+10.0 pp",
        "interval": "+2.0 pp .. +18.0 pp",
        "p": "<0.0001",
        "adj p": "<0.0001",
        "P(beat)": "-",
        "risk": "-",
        "method": "two-proportion z",
        "verdict": "better",
        "units": "100/90",
        "requests": "0/0",
        "why": "",
    }
    assert latency[2:6] == ("1000", "1250", "+250 ms", "-20 ms .. +500 ms")


def test_summary_rows_mark_the_verdict_and_sample_size_reads_as_a_sentence() -> None:
    comparison = Comparison("run_x", "split", "a", False, rows(), None, [])
    table = summary_rows(comparison)
    assert [r["verdict"] for r in table] == ["better", "not yet distinguishable"]
    needed = units_needed(comparison, 5.0)
    assert needed is not None and needed["base"] == 0.8 and needed["change"] == 0.05
    assert units_needed_text(needed).startswith(f"{needed['per_arm']} units per arm")


def test_one_sentence_per_variant_answers_at_a_glance() -> None:
    from dataclasses import replace

    decided, undecided = rows()
    few = replace(undecided, metric="latency p99", verdict=Verdict.TOO_FEW, n_variant=4)
    other = replace(undecided, variant="c", verdict=Verdict.UNADJUSTED)
    arms = {"a": (100, 900), "b": (90, 850), "c": (80, 700)}
    table = [decided, undecided, few, other]
    comparison = Comparison("run_x", "split", "a", False, table, None, [], arms=arms)
    first, second = answer_sentences(comparison)
    assert first == (
        "b against a: better on completion rate; undecided on latency p90; too few units to "
        "judge latency p99 (90 vs 100 units, 850 vs 900 requests)."
    )
    # c's main metric is open: the sentence says how many more units would settle it.
    more = more_units_needed(other)
    assert more is not None and more > 0
    assert second == (
        f"c against a: undecided on latency p90 (80 vs 100 units, 700 vs 900 requests); "
        f"about {80 + more} units per arm would decide latency p90 at its observed +250 ms "
        f"({more} more than the smaller arm's 80)."
    )


def test_more_units_scale_with_the_interval() -> None:
    _, row = rows()
    # Interval -20 .. +500 around +250: se 132.7; 80 units; (1.96 + 0.84)^2 se^2 / 250^2.
    se = 520 / (2 * 1.959963984540054)
    needed = 80 * (se * (1.959963984540054 + 0.8416212335729143) / 250.4) ** 2
    assert more_units_needed(row) == max(0, math.ceil(needed - 80))
    decided, _ = rows()
    assert more_units_needed(decided) is None
    # Under mSPRT the interval is a wider confidence sequence: the row's own (fixed-
    # horizon) standard error is what says how far the data is from deciding.
    from dataclasses import replace

    live = replace(row, interval=Interval(-900.0, 1400.0), standard_error=se)
    assert more_units_needed(live) == more_units_needed(row)


def test_srm_verdict_says_when_it_cannot_judge() -> None:
    lumpy = srm_check({"control": 15, "staging": 2}, {"control": 0.7, "staging": 0.3})
    assert srm_verdict(lumpy).startswith("cannot judge yet: an arm has fewer than 20 units")
    fine = srm_check({"control": 700, "staging": 300}, {"control": 0.7, "staging": 0.3})
    assert srm_verdict(fine).startswith("passed (chi-square 0.00")
    # The units the split assigned, not those with results so far (the verdict rows'):
    # mid-run the two differ, and each says which it counts.
    assert "units assigned: control 700 (expected 700.0), staging 300" in srm_verdict(fine)
    broken = srm_check({"control": 800, "staging": 200}, {"control": 0.7, "staging": 0.3})
    assert srm_verdict(broken).startswith("sample ratio mismatch: chi-square")
