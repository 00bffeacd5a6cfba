"""The Bayesian view of a comparison row: chance to beat control and expected loss, from
the row's own per-unit estimate (a flat prior and the normal approximation)."""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import NormalDist

import pytest

from promptlab.analysis.bayes import CHANCE_THRESHOLD, bayes_view
from promptlab.analysis.compare import Comparison
from promptlab.analysis.simulate import Traffic, bayes_call_rate
from promptlab.analysis.stats import Interval, MetricComparison, Verdict
from promptlab.views.compare import answer_sentences, comparison_cells, fmt_chance


def test_no_difference_is_a_coin_flip_and_loses_what_the_spread_says() -> None:
    view = bayes_view(0.0, 0.02, lower_is_better=False)
    assert view is not None
    assert view.chance_to_beat == pytest.approx(0.5)
    # E[max(0, -X)] for X ~ N(0, s^2) is s / sqrt(2 pi).
    assert view.expected_loss == pytest.approx(0.02 / math.sqrt(2 * math.pi))


def test_a_clear_gain_is_near_certain_with_almost_no_loss() -> None:
    view = bayes_view(0.1, 0.02, lower_is_better=False)
    assert view is not None
    assert view.chance_to_beat == pytest.approx(NormalDist().cdf(5.0))
    assert 0 <= view.expected_loss < 1e-6


def test_lower_is_better_turns_the_sign() -> None:
    faster = bayes_view(-120.0, 40.0, lower_is_better=True)
    slower = bayes_view(120.0, 40.0, lower_is_better=True)
    assert faster is not None and slower is not None
    assert faster.chance_to_beat == pytest.approx(NormalDist().cdf(3.0))
    assert slower.chance_to_beat == pytest.approx(1 - faster.chance_to_beat)
    # Choosing the slower one loses about its 120 ms.
    assert slower.expected_loss == pytest.approx(120.0, rel=0.01)


@pytest.mark.parametrize("se", [None, 0.0, math.inf, math.nan])
def test_no_view_without_a_standard_error(se: float | None) -> None:
    assert bayes_view(0.1, se, lower_is_better=False) is None
    assert bayes_view(None, 0.1, lower_is_better=False) is None


def test_the_table_and_the_answer_carry_it() -> None:
    row = MetricComparison(
        "completion rate",
        "b",
        "a",
        0.8,
        0.9,
        300,
        290,
        0.1,
        Interval(0.02, 0.18),
        0.001,
        "delta method per unit",
        False,
        0.002,
        Verdict.BETTER,
        chance_to_beat=0.9995,
        expected_loss=0.00001,
    )
    cells = comparison_cells(row)
    assert ">99.9%" in cells and "0.00 pp" in cells
    comparison = Comparison("r", "split", "a", False, [row], None, [])
    (sentence,) = answer_sentences(comparison)
    assert "chance to beat control on completion rate >99.9% (expected loss 0.00 pp)" in sentence
    latency = replace(
        row, metric="latency p50", lower_is_better=True, chance_to_beat=0.2, expected_loss=41.6
    )
    assert "20.0%" in comparison_cells(latency) and "42 ms" in comparison_cells(latency)
    assert fmt_chance(None) == "-" and fmt_chance(0.0004) == "<0.1%"


def test_a_a_chance_over_95_fires_as_often_as_the_harness_says() -> None:
    """The guard behind the README's figure: with no difference, one row (CTR, at the
    horizon) says "chance to beat > 95%" about 5% of the time, and some row of the
    table (either direction: a winner or a loser) far more often."""
    traffic = Traffic(units=300)
    one_row = bayes_call_rate(200, traffic, metric="CTR", one_sided=True)
    table = bayes_call_rate(200, traffic)
    assert one_row <= 0.10
    assert table >= 2 * one_row
    assert CHANCE_THRESHOLD == 0.95
