"""The per-unit effects (promptlab/analysis/units.py, sequential.py, cuped.py) against
their textbook formulas, a brute-force bootstrap of users, and the store's own reads."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from promptlab.analysis.compare import compare_arms
from promptlab.analysis.cuped import cuped_rate_difference
from promptlab.analysis.sequential import FINAL, always_valid
from promptlab.analysis.simulate import Traffic, arm_sample, simulate_arm
from promptlab.analysis.units import (
    Estimate,
    fixed_horizon,
    quantile_difference,
    rate_difference,
    rate_variance,
    sorted_quantile,
)
from promptlab.records.unit_samples import COMPLETION, CTR, RatioSample
from promptlab.workbench import Workbench


def test_rate_variance_is_the_delta_method_formula() -> None:
    rng = np.random.default_rng(1)
    den = rng.integers(1, 30, 200).astype(float)
    num = rng.binomial(den.astype(int), rng.beta(2, 8, 200)).astype(float)
    k, mean_x, mean_y = den.size, den.mean(), num.mean()
    r = mean_y / mean_x
    cov = np.cov(num, den, ddof=1)
    # Var(Y/X) = (s_yy - 2 r s_xy + r^2 s_xx) / (k mean_x^2)
    expected = (cov[0, 0] - 2 * r * cov[0, 1] + r * r * cov[1, 1]) / (k * mean_x**2)
    assert rate_variance(RatioSample(num, den)) == pytest.approx(expected, rel=1e-12)


def test_one_request_per_unit_is_the_unpooled_two_proportion_test() -> None:
    a = RatioSample(np.array([1.0] * 30 + [0.0] * 70), np.ones(100))
    b = RatioSample(np.array([1.0] * 45 + [0.0] * 55), np.ones(100))
    found = rate_difference(a, b)
    assert found is not None and found.effect == pytest.approx(0.15)
    var = 0.3 * 0.7 / 99 + 0.45 * 0.55 / 99  # sample variances (ddof 1) over n
    assert found.variance == pytest.approx(var)


def test_quantile_standard_error_agrees_with_a_bootstrap_of_users() -> None:
    rng = np.random.default_rng(5)
    arm = simulate_arm(Traffic(units=300), rng)
    other = simulate_arm(Traffic(units=300), rng)
    (p90,) = quantile_difference(
        (arm.latency, arm.unit, arm.units), (other.latency, other.unit, other.units), (0.9,)
    )
    # Brute force: resample users with replacement, take every request of each drawn user.
    by_user_a = [arm.latency[arm.unit == u] for u in range(arm.units)]
    by_user_b = [other.latency[other.unit == u] for u in range(other.units)]
    draws = []
    for _ in range(400):
        pick_a = rng.integers(0, arm.units, arm.units)
        pick_b = rng.integers(0, other.units, other.units)
        qa = np.quantile(np.concatenate([by_user_a[i] for i in pick_a]), 0.9)
        qb = np.quantile(np.concatenate([by_user_b[i] for i in pick_b]), 0.9)
        draws.append(qb - qa)
    assert math.sqrt(p90.estimate.variance) == pytest.approx(np.std(draws, ddof=1), rel=0.2)


@given(
    st.floats(-1e3, 1e3, allow_nan=False),
    st.floats(1e-6, 1e4, allow_nan=False),
    st.floats(0.01, 100.0, allow_nan=False),
)
def test_interval_excludes_zero_exactly_when_p_is_below_alpha(
    effect: float, variance: float, tau: float
) -> None:
    for found in (
        fixed_horizon(Estimate(effect, variance)),
        always_valid(Estimate(effect, variance), tau),
    ):
        if abs(found.p_value - 0.05) > 1e-9:  # exactly on the edge both are a coin toss
            assert found.interval.excludes_zero() == (found.p_value < 0.05)
        assert found.interval.low <= effect <= found.interval.high


def test_always_valid_is_wider_than_fixed_horizon() -> None:
    estimate = Estimate(0.02, 1e-4)
    fixed, live = fixed_horizon(estimate), always_valid(estimate, 0.03)
    assert live.interval.low < fixed.interval.low and live.p_value > fixed.p_value


def test_each_arms_interval_is_at_the_looks_level_and_the_test_does_not_move() -> None:
    """One interval level per view (issue 61): each arm's interval, the charts' bars, is
    at the look's level as the effect's is (96% at the final look, 99% while collecting),
    where it was 95% beside a 96% effect; the effect's standard error does not move."""
    from statistics import NormalDist

    from promptlab.analysis.sequential import FIXED, interim

    rng = np.random.default_rng(11)
    a = arm_sample("A", simulate_arm(Traffic(units=400), rng))
    b = arm_sample("B", simulate_arm(Traffic(units=400), rng))
    fixed = compare_arms(a, b, look=FIXED)
    z95 = NormalDist().inv_cdf(0.975)
    for look, level in ((FINAL, 0.96), (interim(1000), 0.99)):
        rows = compare_arms(a, b, look=look)
        z = NormalDist().inv_cdf(1 - (1 - level) / 2)
        for mine, base in zip(rows, fixed, strict=True):
            assert mine.standard_error == base.standard_error
            assert mine.control_interval is not None and base.control_interval is not None
            width = mine.control_interval.high - mine.control_interval.low
            was = base.control_interval.high - base.control_interval.low
            if mine.lower_is_better:  # a percentile's interval: wider, around its value
                assert width > was and mine.control_interval.low <= mine.control_value
            else:  # a rate's Wald interval: its half-width scales with z
                assert width == pytest.approx(was * z / z95, rel=1e-9)


def test_cuped_is_plain_delta_method_without_history_and_narrower_with_it() -> None:
    rng = np.random.default_rng(9)
    traffic = Traffic(pre_share=1.0)
    a = arm_sample("A", simulate_arm(traffic, rng))
    b = arm_sample("B", simulate_arm(traffic, rng))
    plain = rate_difference(a.rates[CTR], b.rates[CTR])
    adjusted = cuped_rate_difference(a.rates[CTR], b.rates[CTR], a.pre[CTR], b.pre[CTR])
    assert plain is not None and adjusted is not None
    estimate, reduction = adjusted
    assert 0.2 < reduction < 0.7 and estimate.variance < plain.variance
    none_a = RatioSample(np.zeros(a.units), np.zeros(a.units))
    none_b = RatioSample(np.zeros(b.units), np.zeros(b.units))
    assert cuped_rate_difference(a.rates[CTR], b.rates[CTR], none_a, none_b) is None


def test_logs_read_from_duckdb_compare_as_the_simulated_arms_do(
    demo_db: Path, tmp_path: Path
) -> None:
    # 150 users per arm, many requests each: what the store sums per unit_id must be
    # exactly what the harness sums, row for row.
    rng = np.random.default_rng(3)
    arms = {
        ref: simulate_arm(Traffic(units=150), rng)
        for ref in ("ticket-triage@1.1.0", "ticket-triage@2.0.0")
    }
    lines = ["version,unit_id,latency_ms,clicked,completed,event_time"]
    for index, (ref, arm) in enumerate(arms.items()):
        for u, ms, click, done in zip(
            arm.unit, arm.latency, arm.clicked, arm.completed, strict=True
        ):
            lines.append(
                f"{ref},user-{index}-{u:03d},{float(ms)!r},{str(click).lower()},"
                f"{str(done).lower()},2026-11-20T10:00:00Z"
            )
    path = tmp_path / "logs.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from promptlab.config import Settings

    settings = Settings.from_env({"PROMPTLAB_DB": str(demo_db), "PROMPTLAB_AUTHOR": "tester"})
    with Workbench.open(settings) as wb:
        wb.analysis.import_logs(path)
        stored = wb.analysis.compare_versions(*arms, logs=True, sequential=False)
    (name_a, a), (name_b, b) = arms.items()
    # Logs with --final: the final look, the fixed-horizon test at 4% of the 5%.
    expected = compare_arms(arm_sample(name_a, a), arm_sample(name_b, b), look=FINAL)
    assert stored.method == "fixed horizon, final look (4% of 5%)"
    assert stored.arms == {name_a: (150, a.unit.size), name_b: (150, b.unit.size)}
    for got, want in zip(stored.rows, expected, strict=True):
        assert (got.metric, got.n_control, got.n_variant) == (
            want.metric,
            want.n_control,
            want.n_variant,
        )
        assert got.effect == pytest.approx(want.effect, rel=1e-9)
        assert got.p_value == pytest.approx(want.p_value, rel=1e-6)
    assert [r.metric for r in stored.rows][:2] == [COMPLETION, CTR]


def test_cuped_uses_each_users_logs_before_since(demo_db: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    refs = ("ticket-triage@1.1.0", "ticket-triage@2.0.0")
    lines = ["version,unit_id,latency_ms,clicked,completed,event_time"]
    for index, ref in enumerate(refs):
        arm = simulate_arm(Traffic(units=150, pre_share=1.0), rng)
        for u, click in zip(arm.unit, arm.clicked, strict=True):
            lines.append(
                f"{ref},user-{index}-{u},100,{str(click).lower()},true,2026-11-20T10:00:00Z"
            )
        for u in range(arm.units):  # the same users before: clicks as their history says
            for n in range(int(arm.pre_shown[u])):
                clicked = n < arm.pre_clicked[u]
                # Served by the version before both (1.0.0): a clean pre-period.
                lines.append(
                    f"ticket-triage@1.0.0,user-{index}-{u},100,"
                    f"{str(clicked).lower()},true,2026-11-01T10:00:00Z"
                )
    path = tmp_path / "logs.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from promptlab.config import Settings

    settings = Settings.from_env({"PROMPTLAB_DB": str(demo_db), "PROMPTLAB_AUTHOR": "tester"})
    with Workbench.open(settings) as wb:
        wb.analysis.import_logs(path)
        plain = wb.analysis.compare_versions(*refs, logs=True, since="2026-11-10")
        adjusted = wb.analysis.compare_versions(*refs, logs=True, since="2026-11-10", cuped=True)
        with pytest.raises(Exception, match="CUPED needs production logs and --since"):
            wb.analysis.compare_versions(*refs, logs=True, cuped=True)
    ctr_plain = next(r for r in plain.rows if r.metric == CTR)
    ctr = next(r for r in adjusted.rows if r.metric == CTR)
    assert ctr.test.startswith("delta method + CUPED per unit")
    assert ctr.variance_reduction is not None and ctr.variance_reduction > 0.1
    assert ctr.interval is not None and ctr_plain.interval is not None
    width = ctr.interval.high - ctr.interval.low
    assert width < ctr_plain.interval.high - ctr_plain.interval.low
    # Completion never varies here: nothing to adjust, the plain method stays.
    assert next(r for r in adjusted.rows if r.metric == COMPLETION).variance_reduction is None
    # A pre-period must end before either compared version served anyone: with the
    # same history logged under version A itself, there is none, and CUPED adjusts
    # nothing (A's users would carry A's treatment in their covariate).
    treated = tmp_path / "treated.csv"
    treated.write_text(path.read_text().replace("ticket-triage@1.0.0", refs[0]))
    copy = tmp_path / "treated.duckdb"
    shutil.copy(demo_db, copy)
    other = Settings.from_env({"PROMPTLAB_DB": str(copy), "PROMPTLAB_AUTHOR": "tester"})
    with Workbench.open(other) as wb:
        wb.analysis.import_logs(treated)
        found = wb.analysis.compare_versions(*refs, logs=True, since="2026-11-10", cuped=True)
    assert all(r.variance_reduction is None for r in found.rows)


@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=300),
    st.floats(0, 1),
)
def test_a_quantile_of_the_sorted_values_is_numpys_to_the_last_bit(
    values: list[float], p: float
) -> None:
    """Percentiles read each arm sorted once (analysis/units.py); what they read must be
    exactly what `np.quantile` (its default, linear method) gives."""
    array = np.array(values)
    assert sorted_quantile(np.sort(array), p) == float(np.quantile(array, p))


def test_a_unit_named_like_a_fallback_is_not_merged_with_a_line_without_one(
    db_path: Path,
) -> None:
    """A log line without a unit is a unit of its own ('#' and its row); a unit whose
    name is `#0` is another unit, not that line's (they were merged)."""
    from datetime import UTC, datetime

    from promptlab.store import Store
    from promptlab.store.unit_samples import SampleReads

    when = datetime(2030, 1, 1, tzinfo=UTC)
    with Store(db_path) as store:
        with store.transaction() as tx:
            tx.executemany(
                "INSERT INTO production_logs (prompt_version_id, unit_id, latency_ms, clicked, "
                "completed, event_time, source, imported_at) "
                "VALUES ('pv', ?, 10, true, true, ?, 't', ?)",
                [[None, when, when], ["#0", when, when], ["#0", when, when]],
            )
        arm = SampleReads(store).log_arm("pv", "v", None)
    assert arm.unit_keys is not None and arm.unit_keys.size == 2
