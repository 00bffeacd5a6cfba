"""promptlab.analysis.stats against scipy and statsmodels.

The reference values were computed once with scipy 1.17 and statsmodels 0.15 on the
data below (the calls are named next to each) and are written here as literals, so
these tests need neither statsmodels nor a second implementation.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from promptlab.analysis.stats import (
    Interval,
    MetricComparison,
    Verdict,
    bootstrap_quantile_diff,
    holm,
    holm_verdicts,
    mann_whitney,
    mcnemar,
    sample_size_two_proportions,
    srm_check,
    two_proportions,
    verdict,
    wilcoxon_paired,
    wilson_interval,
)

#: Latencies in ms (lognormal, rounded): A is control, B is slower.
A = [992.6, 1085.3, 913.9, 759.6, 865.8, 736.9, 1010.3, 1483.4, 856.1, 823.7, 1149.4,
     1104.4, 1024.2, 750.6, 983.6, 1222.4, 663.0, 865.0, 561.0, 673.9, 571.1, 924.7, 678.4,
     1076.4, 1040.1, 938.2, 466.4, 844.2, 977.9, 1026.6, 627.0, 859.8, 739.8, 778.5, 1364.1,
     778.8, 982.6, 1293.8, 832.9, 959.6]  # fmt: skip
B = [1191.7, 1175.1, 798.3, 1179.5, 1733.1, 724.8, 1491.9, 1194.9, 951.0, 2100.9, 1449.1,
     804.5, 1178.9, 1370.6, 1089.4, 1415.0, 1130.1, 1408.4, 1775.0, 941.3, 1225.3, 1003.3,
     1197.7, 807.4, 968.9, 1087.0, 1509.6, 1625.5, 775.1, 908.3, 1399.8, 634.1, 1003.3,
     1119.7, 1680.9, 1417.7, 1045.1, 1032.2, 1069.5, 1820.9]  # fmt: skip


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


def test_two_proportions_large_counts_use_the_pooled_z_test() -> None:
    # statsmodels confint_proportions_2indep(450, 500, 420, 500, method="newcomb");
    # proportions_ztest([450, 420], [500, 500]) -> z 2.8209, p below.
    result = two_proportions(420, 500, 450, 500)
    assert result.test == "two-proportion z"
    close(result.effect, 0.06)
    close(result.interval.low, 0.018319148809120923)
    close(result.interval.high, 0.10181619041389847)
    assert result.p_value == pytest.approx(0.004788693590031572, rel=1e-12)


def test_two_proportions_small_counts_use_fisher_exact() -> None:
    # scipy fisher_exact([[9, 1], [4, 6]]); statsmodels newcomb interval for 9/10 - 4/10.
    result = two_proportions(4, 10, 9, 10)
    assert result.test == "Fisher exact"
    close(result.effect, 0.5)
    close(result.p_value, 0.05727554179566563)
    close(result.interval.low, 0.08159397542744301)
    close(result.interval.high, 0.7459363249109722)


def test_two_proportions_with_an_empty_arm_says_so() -> None:
    result = two_proportions(0, 0, 3, 10)
    assert (result.test, result.p_value) == ("no data", 1.0)


def test_mcnemar_is_exact_for_few_discordant_pairs() -> None:
    # statsmodels mcnemar([[30, 3], [12, 5]], exact=True).pvalue
    result = mcnemar(3, 12)
    assert result.test == "McNemar exact"
    close(result.p_value, 0.03515625)


def test_mcnemar_is_chi_square_with_continuity_for_many() -> None:
    # statsmodels mcnemar([[30, 14], [30, 5]], exact=False, correction=True)
    result = mcnemar(14, 30)
    assert result.test == "McNemar chi-square"
    close(result.statistic, 5.113636363636363)
    close(result.p_value, 0.023738515250054576)
    assert mcnemar(0, 0).p_value == 1.0


def test_mann_whitney_matches_scipy() -> None:
    # scipy mannwhitneyu(B, A, alternative="two-sided")
    result = mann_whitney(A, B)
    assert result.statistic == 1247.0
    close(result.p_value, 1.7353675596479183e-05)


def test_wilcoxon_paired_matches_scipy() -> None:
    # scipy wilcoxon(B, A)
    result = wilcoxon_paired(A, B)
    assert result.statistic == 131.0
    close(result.p_value, 8.252464976976626e-05)
    assert wilcoxon_paired(A, A).p_value == 1.0
    with pytest.raises(ValueError, match="differ in length"):
        wilcoxon_paired(A, B[:-1])


@pytest.mark.parametrize(
    ("q", "effect", "low", "high"),
    [
        # scipy bootstrap((A, B), quantile(y, q) - quantile(x, q), method="percentile",
        # n_resamples=20000, random_state=1): another random stream, so a few ms apart.
        (0.9, 529.42, 191.3, 722.761),
        (0.5, 287.15, 121.95, 416.456),
    ],
)
def test_bootstrap_quantile_diff_agrees_with_scipy_bootstrap(
    q: float, effect: float, low: float, high: float
) -> None:
    found, interval = bootstrap_quantile_diff(A, B, q, n_boot=20_000, seed=1)
    assert found == pytest.approx(effect, abs=1e-6)  # numpy's linear quantile, exactly
    width = high - low
    assert interval.low == pytest.approx(low, abs=0.03 * width)
    assert interval.high == pytest.approx(high, abs=0.03 * width)


def test_bootstrap_draws_the_same_distribution_as_resampling_indexes() -> None:
    rng = np.random.default_rng(3)
    x = np.sort(rng.exponential(100.0, 300))
    naive = np.quantile(x[rng.integers(0, x.size, (20_000, x.size))], 0.9, axis=1)
    from promptlab.analysis.stats import _bootstrap_quantiles

    fast = _bootstrap_quantiles(x, 0.9, 20_000, np.random.default_rng(4))
    for p in (0.025, 0.25, 0.5, 0.75, 0.975):
        assert np.quantile(fast, p) == pytest.approx(np.quantile(naive, p), rel=0.02)


def test_bootstrap_of_a_million_samples_stays_small_in_memory() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(7, 0.3, 1_000_000), rng.lognormal(7.01, 0.3, 1_000_000)
    tracemalloc.start()
    try:
        bootstrap_quantile_diff(a, b, 0.99, n_boot=2000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Sorted copies of both arms (16 MB) and the draws: not 2000 resamples of a million.
    assert peak < 40_000_000


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
        metric=metric, variant="b", control="a", control_value=1.0, variant_value=1.0 + effect,
        n_control=100, n_variant=100, effect=effect, interval=Interval(low, high), p_value=p,
        test="t", lower_is_better=lower,
    )  # fmt: skip


def test_verdicts_are_direction_aware_and_holm_adjusted() -> None:
    rows = holm_verdicts(
        [
            _comparison("completion", 0.05, 0.02, 0.08, 0.001, lower=False),
            _comparison("p90 latency", 120.0, 40.0, 200.0, 0.002, lower=True),
            # Significant alone (0.03, 0.04), not after Holm over four comparisons (0.06).
            _comparison("p50 latency", -30.0, -50.0, -10.0, 0.03, lower=True),
            _comparison("p99 latency", -80.0, -150.0, -5.0, 0.04, lower=True),
        ]
    )
    assert [r.verdict for r in rows] == [
        Verdict.BETTER,
        Verdict.WORSE,
        Verdict.UNDECIDED,
        Verdict.UNDECIDED,
    ]
    assert [r.adjusted_p for r in rows] == pytest.approx([0.004, 0.006, 0.06, 0.06])
    lone = holm_verdicts([_comparison("p50 latency", -30.0, -50.0, -10.0, 0.03, lower=True)])
    assert lone[0].verdict == Verdict.BETTER
    # An interval that straddles zero never decides, whatever the p-value.
    assert verdict(5.0, Interval(-1.0, 9.0), 0.0001, lower_is_better=False) == Verdict.UNDECIDED


def test_holm_counts_each_test_once_and_rows_without_data_not_at_all() -> None:
    def row(metric: str, p: float, test: str) -> MetricComparison:
        return replace(_comparison(metric, -30.0, -50.0, -10.0, p, lower=True), test=test)

    rank = "bootstrap + Mann-Whitney U"
    rows = holm_verdicts(
        [
            row("completion rate", 0.02, "two-proportion z"),
            row("CTR", 1.0, "no data"),
            # One rank test behind the three percentiles: one hypothesis, not three.
            row("latency p50", 0.01, rank),
            row("latency p90", 0.01, rank),
            row("latency p99", 0.01, rank),
        ]
    )
    # Holm over two tests: 0.01 * 2 = 0.02, then max(0.02, 0.02 * 1) = 0.02.
    assert [r.adjusted_p for r in rows] == pytest.approx([0.02, None, 0.02, 0.02, 0.02])
    assert rows[1].verdict == Verdict.UNDECIDED
