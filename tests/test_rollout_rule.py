"""The guarded rollout's decision rule (promptlab/analysis/rollout.py): each guardrail's
direction, no verdict without data, every action of `decide`, and a small seeded run of
the A/A simulation bench/rollout_aa.py makes at full size (identical variants are
rarely killed, a variant 5 points worse on error rate nearly always is)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from promptlab.analysis.rollout import (
    ERROR_RATE,
    MIN_UNITS_TO_JUDGE,
    Decision,
    Guardrail,
    GuardrailLook,
    decide,
    look,
)
from promptlab.analysis.stats import Interval
from promptlab.records.unit_samples import CTR, ArmSample, RatioSample

STAGES = (1, 5, 25, 50, 100)
ALL = (
    Guardrail("error_rate", 0.02),
    Guardrail("latency_p90_ms", 300),
    Guardrail("ctr", 0.01),
)


def arm(
    units: int = 600,
    *,
    error: float = 0.02,
    ctr: float = 0.10,
    latency_ms: float = 800.0,
    seed: int = 0,
) -> ArmSample:
    """An arm of `units` units making 1 to 5 calls each; succeeded calls are timed and
    are impressions."""
    rng = np.random.default_rng(seed)
    calls = rng.integers(1, 6, units)
    unit = np.repeat(np.arange(units), calls)
    failed = rng.random(unit.size) < error
    clicked = ~failed & (rng.random(unit.size) < ctr)
    latency = latency_ms * rng.lognormal(0, 0.4, unit.size)

    def summed(values: Any) -> Any:
        return np.bincount(unit, weights=values, minlength=units).astype(np.float64)

    return ArmSample(
        name="arm",
        units=units,
        requests=int(unit.size),
        unitless=0,
        rates={
            ERROR_RATE: RatioSample(summed(failed), calls.astype(np.float64)),
            CTR: RatioSample(summed(clicked), summed(~failed)),
        },
        latency=latency[~failed],
        latency_unit=unit[~failed].astype(np.int64),
    )


def only(metric: str, worse_by: float, control: ArmSample, variant: ArmSample) -> GuardrailLook:
    return look(control, variant, [Guardrail(metric, worse_by)], planned_units=1000)[0]


# ---- look: each metric's direction --------------------------------------------------


def test_a_higher_error_rate_beyond_the_tolerance_regresses() -> None:
    found = only("error_rate", 0.02, arm(seed=1), arm(error=0.20, seed=2))
    assert found.regressed
    assert found.interval is not None and found.interval.low > 0.02
    assert found.effect is not None and found.effect > 0.1
    assert found.line.startswith("error_rate +0.1")
    assert found.line.endswith("worse by more than 0.02: regressed")


def test_a_lower_error_rate_never_regresses() -> None:
    found = only("error_rate", 0.02, arm(error=0.20, seed=1), arm(error=0.02, seed=2))
    assert found.interval is not None and found.interval.high < 0  # much better
    assert not found.regressed


def test_a_lower_ctr_regresses_and_a_higher_one_does_not() -> None:
    control = arm(ctr=0.30, seed=1)
    assert only("ctr", 0.01, control, arm(ctr=0.05, seed=2)).regressed
    better = only("ctr", 0.01, control, arm(ctr=0.60, seed=3))
    assert better.interval is not None and better.interval.low > 0
    assert not better.regressed


def test_a_slower_p90_regresses_and_a_faster_one_does_not() -> None:
    control = arm(latency_ms=800, seed=1)
    slower = only("latency_p90_ms", 300, control, arm(latency_ms=2400, seed=2))
    assert slower.regressed
    assert slower.control is not None and slower.variant is not None
    assert slower.variant - slower.control == pytest.approx(slower.effect)
    assert "worse by more than 300 ms: regressed" in slower.line
    faster = only("latency_p90_ms", 300, control, arm(latency_ms=200, seed=3))
    assert faster.effect is not None and faster.effect < -300
    assert not faster.regressed


def test_worse_but_within_the_tolerance_is_no_regression() -> None:
    # Clearly worse (the sequence excludes 0) but not clearly beyond worse_by.
    found = only("error_rate", 0.2, arm(units=2000, seed=1), arm(units=2000, error=0.12, seed=2))
    assert found.interval is not None and found.interval.low > 0
    assert not found.regressed
    assert "not shown worse by more than 0.2" in found.line


def test_the_family_widens_each_sequence() -> None:
    control, variant = arm(seed=1), arm(error=0.05, seed=2)
    alone = look(control, variant, [ALL[0]], planned_units=1000)[0].interval
    in_family = look(control, variant, ALL, planned_units=1000)[0].interval
    assert alone is not None and in_family is not None
    assert in_family.high - in_family.low > alone.high - alone.low


# ---- look: no data, no verdict --------------------------------------------------------


def test_a_metric_without_data_is_not_judged() -> None:
    control, variant = arm(seed=1), arm(error=0.9, seed=2)
    bare = ArmSample(
        name="bare",
        units=variant.units,
        requests=variant.requests,
        unitless=0,
        rates={CTR: RatioSample(np.zeros(variant.units), np.zeros(variant.units))},
        latency=np.zeros(0),
        latency_unit=np.zeros(0, dtype=np.int64),
    )
    for found in look(control, bare, ALL, planned_units=1000):
        assert found.interval is None and not found.regressed
        assert "not judged yet (no data)" in found.line


def test_too_few_units_are_not_judged() -> None:
    units = MIN_UNITS_TO_JUDGE - 1
    found = look(arm(units, seed=1), arm(units, error=0.9, seed=2), ALL, planned_units=1000)
    assert all(f.interval is None and not f.regressed for f in found)
    assert f"too few units ({units}" in found[0].line


def test_guardrails_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown guardrail"):
        Guardrail("p99", 10)
    with pytest.raises(ValueError, match="above 0"):
        Guardrail("ctr", 0)


# ---- decide -----------------------------------------------------------------------------


def a_look(regressed: bool, metric: str = "error_rate") -> GuardrailLook:
    return GuardrailLook(
        metric=metric,
        worse_by=0.02,
        control=0.02,
        variant=0.071 if regressed else 0.021,
        effect=0.051 if regressed else 0.001,
        interval=Interval(0.031, 0.071) if regressed else Interval(-0.01, 0.012),
        units=(300, 300),
        regressed=regressed,
    )


def decided(regressed: bool, stage: int, units: int, on_regression: str = "kill") -> Decision:
    looks = [a_look(regressed), a_look(False, "ctr")]
    return decide(looks, stage, STAGES, units, 200, on_regression)


@pytest.mark.parametrize("on_regression", ["kill", "hold"])
def test_a_regression_takes_the_rollouts_action(on_regression: str) -> None:
    found = decided(True, 1, 500, on_regression)
    assert found.action == on_regression
    assert "error_rate +0.051 (CS +0.031 to +0.071) worse by more than 0.02" in found.reason
    assert "ctr" not in found.reason
    assert len(found.looks) == 2


def test_a_stage_waits_for_its_units() -> None:
    found = decided(False, 1, 150)
    assert found.action == "wait"
    assert "150 of 200 units per arm" in found.reason and "(5%)" in found.reason


def test_a_full_stage_advances_to_the_next() -> None:
    found = decided(False, 1, 200)
    assert found.action == "advance"
    assert found.reason.endswith("-> 25%")


def test_the_last_stage_completes() -> None:
    assert decided(False, len(STAGES) - 1, 250).action == "complete"
    assert decided(False, len(STAGES) - 1, 199).action == "wait"


def test_decide_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="kill or hold"):
        decided(False, 0, 10, "promote")
    with pytest.raises(ValueError, match="stage 5"):
        decided(False, 5, 10)


# ---- the A/A simulation, small ----------------------------------------------------------


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """bench/rollout_aa.py, whose simulation this guards at a smaller size."""
    path = Path(__file__).resolve().parent.parent / "bench" / "rollout_aa.py"
    spec = importlib.util.spec_from_file_location("rollout_aa_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_identical_variants_are_rarely_killed(bench: ModuleType) -> None:
    # The rule's budget is 5% over every look and guardrail; 200 rollouts at a true 5%
    # would exceed 8% about once in 50 seeds.
    found = bench.simulate(200, bench.Behaviour(), bench.Behaviour(), seed=2026)
    assert found.killed <= 0.08


def test_a_variant_at_the_tolerance_is_rarely_killed(bench: ModuleType) -> None:
    # Worse by exactly worse_by (2% -> 4%): the edge of what the rule must let through.
    found = bench.simulate(200, bench.Behaviour(), bench.Behaviour(error_rate=0.04), seed=11)
    assert found.killed <= 0.08


def test_a_variant_five_points_worse_is_killed(bench: ModuleType) -> None:
    found = bench.simulate(200, bench.Behaviour(), bench.Behaviour(error_rate=0.07), seed=7)
    assert found.killed >= 0.90
    assert found.median_units_at_kill is not None
    assert found.median_units_at_kill < bench.PLAN.planned_units


def test_stages_may_be_fractions_of_a_percent() -> None:
    found = decide([a_look(False)], 0, (0.5, 1.0, 100.0), 200, 200, "hold")
    assert found.action == "advance"
    assert "(0.5%)" in found.reason and found.reason.endswith("-> 1%")
