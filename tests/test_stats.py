"""promptlab.analysis.stats (Wilson, Holm and the verdicts, SRM, sample size) against scipy
and statsmodels.

The reference values were computed once with scipy 1.17 and statsmodels 0.15 on the
data below (the calls are named next to each) and are written here as literals, so
these tests need neither statsmodels nor a second implementation.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from promptlab.analysis.stats import (
    SRM_MIN_UNITS,
    Interval,
    MetricComparison,
    Verdict,
    holm,
    holm_verdicts,
    sample_size_two_proportions,
    srm_check,
    wilson_interval,
)


def close(value: float, expected: float) -> None:
    assert value == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    ("successes", "n", "confidence", "low", "high"),
    [
        # statsmodels proportion_confint(s, n, alpha=1 - confidence, method="wilson")
        (37, 50, 0.95, 0.6044684273515116, 0.841284725064476),
        (0, 12, 0.95, 0.0, 0.24249400665524096),
        (7, 9, 0.90, 0.5036427823767538, 0.9235052624456037),
    ],
)
def test_wilson_interval_matches_statsmodels(
    successes: int, n: int, confidence: float, low: float, high: float
) -> None:
    interval = wilson_interval(successes, n, confidence)
    close(interval.low, low)
    close(interval.high, high)


def test_wilson_interval_of_nothing_is_everything() -> None:
    assert wilson_interval(0, 0) == Interval(0.0, 1.0)
    with pytest.raises(ValueError, match="between 0 and n=3"):
        wilson_interval(4, 3)


@given(st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_holds_the_estimate_inside_zero_one(case: tuple[int, int]) -> None:
    successes, n = case
    interval = wilson_interval(successes, n)
    assert 0.0 <= interval.low <= successes / n <= interval.high <= 1.0


def test_holm_matches_statsmodels() -> None:
    # statsmodels multipletests([...], method="holm")[1]
    adjusted = holm([0.01, 0.04, 0.03, 0.2, 0.005])
    assert adjusted == pytest.approx([0.04, 0.09, 0.09, 0.2, 0.025], rel=1e-12)
    assert holm([]) == []


@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_holm_never_lowers_a_p_value_and_keeps_their_order(p_values: list[float]) -> None:
    adjusted = holm(p_values)
    assert all(p <= a <= 1.0 for p, a in zip(p_values, adjusted, strict=True))
    ranked = sorted(range(len(p_values)), key=lambda i: p_values[i])
    assert [adjusted[i] for i in ranked] == sorted(adjusted)


def test_srm_check_matches_scipy_chisquare_and_warns_below_0_001() -> None:
    # scipy chisquare([5210, 4790], [5000, 5000])
    broken = srm_check({"a": 5210, "b": 4790}, {"a": 0.5, "b": 0.5})
    close(broken.statistic, 17.64)
    close(broken.p_value, 2.6691498031812692e-05)
    assert broken.mismatch
    # scipy chisquare([715, 285], [700, 300])
    fine = srm_check({"control": 715, "staging": 285}, {"control": 0.7, "staging": 0.3})
    close(fine.statistic, 1.0714285714285714)
    close(fine.p_value, 0.3006229881969038)
    assert not fine.mismatch and fine.expected == {"control": 700.0, "staging": 300.0}


def test_srm_check_units_in_a_variant_expected_to_get_none_is_a_mismatch() -> None:
    result = srm_check({"control": 10, "off": 1}, {"control": 1.0, "off": 0.0})
    assert result.mismatch and result.p_value == 0.0
    assert not srm_check({"control": 10}, {"control": 1.0, "off": 0.0}).mismatch
    assert not srm_check({}, {"a": 0.5, "b": 0.5}).mismatch


@pytest.mark.parametrize(
    ("p_base", "effect", "alpha", "power", "expected"),
    [
        # statsmodels samplesize_proportions_2indep_onetail(effect, p_base, power, alpha=...)
        # -> 3840.85 and 1299.47, rounded up.
        (0.10, 0.02, 0.05, 0.8, 3841),
        (0.90, -0.05, 0.01, 0.9, 1300),
    ],
)
def test_sample_size_matches_statsmodels(
    p_base: float, effect: float, alpha: float, power: float, expected: int
) -> None:
    assert sample_size_two_proportions(p_base, effect, alpha, power) == expected


def test_sample_size_refuses_impossible_rates() -> None:
    with pytest.raises(ValueError, match="0 < p_base < 1"):
        sample_size_two_proportions(0.95, 0.1)


def _comparison(metric: str, effect: float, low: float, high: float, p: float, lower: bool):
    return MetricComparison(
        metric=metric,
        variant="b",
        control="a",
        control_value=1.0,
        variant_value=1.0 + effect,
        n_control=100,
        n_variant=100,
        effect=effect,
        interval=Interval(low, high),
        p_value=p,
        test="t",
        lower_is_better=lower,
    )


def test_verdicts_are_direction_aware_and_holm_adjusted() -> None:
    rows = holm_verdicts(
        [
            _comparison("completion", 0.05, 0.02, 0.08, 0.001, lower=False),
            _comparison("p90 latency", 120.0, 40.0, 200.0, 0.002, lower=True),
            # Significant alone (0.03, 0.04), not after Holm over four comparisons (0.06).
            _comparison("p50 latency", -30.0, -50.0, -10.0, 0.03, lower=True),
            _comparison("p99 latency", -80.0, -150.0, -5.0, 0.04, lower=True),
            _comparison("CTR", 0.01, -0.02, 0.04, 0.5, lower=False),
        ]
    )
    assert [r.verdict for r in rows] == [
        Verdict.BETTER,
        Verdict.WORSE,
        Verdict.UNADJUSTED,
        Verdict.UNADJUSTED,
        Verdict.UNDECIDED,
    ]
    assert [r.adjusted_p for r in rows] == pytest.approx([0.005, 0.008, 0.09, 0.09, 0.5])
    assert rows[0].reason == "adjusted p 0.005 < 0.05 (Holm over 5 tests); the interval excludes 0"
    assert rows[2].reason == "p 0.03 < 0.05 alone, adjusted p 0.09 (Holm over 5 tests)"
    assert rows[4].reason == "the interval includes 0 (p 0.5)"
    lone = holm_verdicts([_comparison("p50 latency", -30.0, -50.0, -10.0, 0.03, lower=True)])
    assert lone[0].verdict == Verdict.BETTER


def test_rows_without_data_or_with_too_few_units_are_not_in_the_family() -> None:
    few = replace(
        _comparison("latency p50", -30.0, -50.0, -10.0, 0.01, lower=True),
        verdict=Verdict.TOO_FEW,
        reason="too few units (3; a verdict needs 100 per arm)",
    )
    rows = holm_verdicts(
        [
            _comparison("completion rate", -30.0, -50.0, -10.0, 0.02, lower=True),
            replace(_comparison("CTR", 0.0, 0.0, 0.0, 1.0, lower=False), test="no data"),
            few,
            _comparison("latency p90", -30.0, -50.0, -10.0, 0.01, lower=True),
        ]
    )
    # Holm over the two tests that ran: 0.01 * 2 = 0.02, then max(0.02, 0.02 * 1).
    assert [r.adjusted_p for r in rows] == pytest.approx([0.02, None, None, 0.02])
    assert rows[1].verdict == Verdict.UNDECIDED and rows[1].reason == "no data to compare"
    assert rows[2].verdict == Verdict.TOO_FEW and rows[2].reason.startswith("too few units (3")


def test_srm_check_cannot_judge_an_arm_with_too_few_units() -> None:
    # 15 and 2 customers: lumpy, not broken, and too few to tell.
    result = srm_check({"control": 15, "staging": 2}, {"control": 0.7, "staging": 0.3})
    assert not result.judged and not result.mismatch
    enough = srm_check(
        {"control": 7 * SRM_MIN_UNITS, "staging": 3 * SRM_MIN_UNITS},
        {"control": 0.7, "staging": 0.3},
    )
    assert enough.judged and not enough.mismatch
