"""The p column is the test's own p: on one request per unit, a rate's row matches the
two-proportion z test computed with scipy, at the final look and at a fixed one; the
look's share of the 5% and Holm's correction live in the adjusted p alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from promptlab.analysis.arm_rows import compare_arms
from promptlab.analysis.sequential import FINAL, FIXED, INTERIM_ALPHA, interim
from promptlab.analysis.stats import Verdict, holm, holm_verdicts
from promptlab.records.unit_samples import COMPLETION, CTR, ArmSample, RatioSample

UNITS = 4_000


def _arm(name: str, clicked: np.ndarray, completed: np.ndarray) -> ArmSample:
    ones = np.ones(clicked.size)
    latency = np.random.default_rng(len(name)).lognormal(6.0, 0.4, clicked.size)
    return ArmSample(
        name=name,
        units=clicked.size,
        requests=clicked.size,
        unitless=0,
        rates={
            COMPLETION: RatioSample(completed.astype(np.float64), ones),
            CTR: RatioSample(clicked.astype(np.float64), ones),
        },
        latency=latency,
        latency_unit=np.arange(clicked.size, dtype=np.int64),
    )


def _two_proportion_p(x_a: int, x_b: int, n: int) -> float:
    """The textbook two-sided two-proportion z test (pooled under the null)."""
    pooled = (x_a + x_b) / (2 * n)
    se = math.sqrt(pooled * (1 - pooled) * 2 / n)
    return float(2 * norm.sf(abs(x_b / n - x_a / n) / se))


@pytest.fixture(scope="module")
def arms() -> tuple[ArmSample, ArmSample]:
    rng = np.random.default_rng(61)
    a = _arm("a", rng.random(UNITS) < 0.100, rng.random(UNITS) < 0.95)
    b = _arm("bb", rng.random(UNITS) < 0.108, rng.random(UNITS) < 0.95)
    return a, b


@pytest.mark.parametrize("look", [FINAL, FIXED], ids=["final", "fixed"])
def test_a_rate_row_carries_the_two_proportion_tests_own_p(
    arms: tuple[ArmSample, ArmSample], look: object
) -> None:
    a, b = arms
    rows = holm_verdicts(compare_arms(a, b, look=look))  # type: ignore[arg-type]
    by_metric = {r.metric: r for r in rows}
    for metric in (CTR, COMPLETION):
        x_a, x_b = int(a.rates[metric].num.sum()), int(b.rates[metric].num.sum())
        reference = _two_proportion_p(x_a, x_b, UNITS)
        assert by_metric[metric].p_value == pytest.approx(reference, rel=0.05)
    # The adjusted p is Holm's over the table, each p first put on the family's scale
    # by its look's share (x 1.25 at the final look's 4%, x 1 at a fixed look).
    scale = 0.05 / look.alpha  # type: ignore[attr-defined]
    tested = [r for r in rows if r.adjusted_p is not None]
    expected = holm([min(1.0, r.p_value * scale) for r in tested])
    assert [r.adjusted_p for r in tested] == pytest.approx(expected)


def test_a_p_between_the_looks_share_and_five_percent_is_not_significant_alone(
    arms: tuple[ArmSample, ArmSample],
) -> None:
    """At the final look a row's own p is held to 4%: 0.045 is neither a verdict nor
    "significant before adjustment"."""
    a, b = arms
    ctr = next(r for r in compare_arms(a, b, look=FINAL) if r.metric == CTR)
    from dataclasses import replace

    row = replace(ctr, p_value=0.045)
    (decided,) = holm_verdicts([row])
    assert decided.verdict == Verdict.UNDECIDED
    assert decided.adjusted_p == pytest.approx(0.045 * 1.25)
    (alone,) = holm_verdicts([replace(ctr, p_value=0.035)])
    assert alone.adjusted_p == pytest.approx(0.035 * 1.25)
    assert alone.verdict in (Verdict.BETTER, Verdict.WORSE)
    assert "4% of 5%" in alone.reason


def test_an_interim_row_carries_the_always_valid_p_and_its_one_percent(
    arms: tuple[ArmSample, ArmSample],
) -> None:
    a, b = arms
    ctr = next(r for r in compare_arms(a, b, look=interim(UNITS)) if r.metric == CTR)
    assert ctr.look_alpha == INTERIM_ALPHA
    (decided,) = holm_verdicts([ctr])
    assert decided.adjusted_p == pytest.approx(min(1.0, ctr.p_value * 5))
