"""The A/A harness (promptlab/analysis/simulate.py) guards every statistical claim of
`compare`: with no true difference the table calls a winner at most 7% of the time,
with a real +60% per-user CTR lift it finds it at least 80% of the time. Seeded, so the
figures are the same on every machine; bench/aa.py runs the full-size version."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from promptlab.analysis.sequential import MIXTURE_RATIO, infer, interim, tuned_width
from promptlab.analysis.simulate import (
    Traffic,
    cuped_effects,
    false_positive_rate,
    paired_false_positive_rate,
    past_horizon_false_positive_rate,
    power,
    session_false_positive_rate,
    user_false_positive_rate,
)
from promptlab.analysis.stats import MIN_ROWS_PAIRED, MIN_UNITS_PER_ARM
from promptlab.analysis.units import Estimate
from promptlab.records.unit_samples import SCORE_PREFIX

TRAFFIC = Traffic()
#: The family-wise false-positive rate the table may reach (5% nominal, plus room for
#: the simulation's own noise).
MAX_FALSE_POSITIVES = 0.07


def test_the_harness_catches_a_request_level_analysis() -> None:
    # Counting every request as independent is what the harness exists to catch.
    assert false_positive_rate(40, TRAFFIC, per_request=True) > 0.5


@pytest.mark.parametrize("shape", ["logs", "split"])
def test_per_unit_analysis_keeps_false_positives_down(shape: str) -> None:
    assert false_positive_rate(200, replace(TRAFFIC, shape=shape)) <= MAX_FALSE_POSITIVES


def test_per_unit_analysis_finds_a_real_lift() -> None:
    assert power(200, TRAFFIC, lift=0.6) >= 0.8


def test_looking_twenty_times_needs_the_always_valid_test() -> None:
    assert false_positive_rate(60, TRAFFIC, looks=20) > 0.15
    assert false_positive_rate(100, TRAFFIC, looks=20, sequential=True) <= MAX_FALSE_POSITIVES


def test_always_valid_looks_then_the_final_one_find_most_of_a_real_lift() -> None:
    """19 interim looks tuned to the horizon, then the final fixed look at 4%: a +60% CTR
    lift is found at least 75% of the time (measured 81%; the always-valid test alone
    at the horizon, 32%, and tuned to control's value as before, 45%)."""
    assert power(100, TRAFFIC, lift=0.6, sequential=True, looks=20) >= 0.75
    assert power(100, TRAFFIC, lift=0.6, only=interim(TRAFFIC.units)) < 0.5


def test_the_mixture_is_tuned_to_the_planned_horizon() -> None:
    """Tuned to the horizon, the interim test at the horizon is as sharp as the mSPRT can
    be there; the width follows the plan, not control's value at each look."""
    variance, units = 0.0004, 300
    wide = tuned_width(variance, units, planned_units=300)
    assert wide == pytest.approx(math.sqrt(MIXTURE_RATIO * variance))
    assert tuned_width(variance, units, planned_units=1200) == pytest.approx(wide / 2)
    assert 11 < MIXTURE_RATIO < 13  # the narrowest confidence sequence at 1%
    estimate = Estimate(effect=0.05, variance=variance)
    at_plan = infer(estimate, interim(300), units).interval
    off_plan = infer(estimate, interim(30_000), units).interval
    assert at_plan.high - at_plan.low < off_plan.high - off_plan.low


def test_the_mixture_stays_frozen_past_the_planned_horizon() -> None:
    """Past the horizon a per-unit mean's variance keeps falling as 1/n; the width stays
    what it was at the horizon (one mixture), where capping units/planned at 1 let it
    shrink with the data (1.33% interim false positives against the 1% budget)."""
    variance, planned = 0.0004, 300
    at_horizon = tuned_width(variance, planned, planned_units=planned)
    for times in (2, 3, 10):
        later = tuned_width(variance / times, planned * times, planned_units=planned)
        assert later == pytest.approx(at_horizon)


def test_looking_on_to_three_times_the_horizon_stays_within_the_interim_budget() -> None:
    """30 interim looks while the data grows to 3x the planned units: the interim looks
    together stay near their 1% (measured 0.7% here, 1 pair of 150; 0.2% over 1,500
    pairs in bench/aa.py, and 0.3% looking 60 times to 10x the horizon over 1,000)."""
    assert past_horizon_false_positive_rate(150, TRAFFIC, looks=30) <= 0.02


def test_cuped_narrows_the_ctr_effect_and_stays_valid() -> None:
    traffic = replace(TRAFFIC, pre_share=1.0)
    correlation, ratio = cuped_effects(60, traffic)
    assert 0.5 < correlation < 0.75
    assert ratio < 0.8
    assert false_positive_rate(200, traffic, cuped=True) <= MAX_FALSE_POSITIVES


def test_at_the_minimum_of_units_false_positives_stay_near_nominal() -> None:
    # 100 users with this heavy a tail is as small as a verdict is allowed to get:
    # measured 7-8% family-wise there (bench/aa.py), 3% at 600.
    traffic = replace(TRAFFIC, units=MIN_UNITS_PER_ARM)
    assert false_positive_rate(200, traffic, seed=99) <= 0.10


def test_all_mode_runs_at_their_minimum_of_rows_keep_false_positives_down() -> None:
    assert paired_false_positive_rate(200, MIN_ROWS_PAIRED) <= MAX_FALSE_POSITIVES
    assert paired_false_positive_rate(200, MIN_ROWS_PAIRED, repeats=3) <= MAX_FALSE_POSITIVES


def test_a_replayed_log_is_analysed_per_session() -> None:
    # Each version answers a session in a style of its own on every turn of it: counted
    # per turn, identical versions "differ" often; per session (promptlab compare on a
    # replay), the table stays at the nominal rate.
    assert session_false_positive_rate(200, 60) <= MAX_FALSE_POSITIVES  # measured 5%
    assert session_false_positive_rate(100, 60, per_turn=True) >= 0.25  # measured 30%


def test_a_replay_of_returning_users_is_analysed_per_user() -> None:
    # Each version answers a user in a style of its own in every session of theirs: with
    # users who come back, sessions are not independent either. Per user (a replay with
    # `unit_column`), the table stays at the nominal rate; per session it does not.
    assert user_false_positive_rate(200, 40) <= MAX_FALSE_POSITIVES  # measured 5.5%
    assert user_false_positive_rate(100, 40, per_session=True) >= 0.15  # measured 24%


def test_a_score_against_expected_answers_is_analysed_per_unit() -> None:
    # Users differ in how often they get a right answer (some ask harder questions):
    # counted per request, an accuracy with no true difference "differs" most of the
    # time; per unit it stays at the nominal rate, and the whole table with it.
    traffic = replace(TRAFFIC, accuracy_mean=0.7)
    accuracy = f"{SCORE_PREFIX}exact"
    assert false_positive_rate(40, traffic, per_request=True, metric=accuracy) > 0.3
    assert false_positive_rate(200, traffic, metric=accuracy) <= 0.05
    assert false_positive_rate(200, traffic) <= MAX_FALSE_POSITIVES
