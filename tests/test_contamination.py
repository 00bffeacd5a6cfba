"""Units seen under both versions (promptlab/analysis/contamination.py): counted, left out
of the comparison by default, reported; kept only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from promptlab.analysis.compare import compare_arms
from promptlab.analysis.contamination import shared_units, without_shared
from promptlab.analysis.sequential import FINAL
from promptlab.analysis.simulate import Requests, Traffic, arm_sample, simulate_arm
from promptlab.analysis.simulate_shared import contamination_effects
from promptlab.cli import main
from promptlab.config import Settings
from promptlab.workbench import Workbench

REFS = ("ticket-triage@1.1.0", "ticket-triage@2.0.0")


def _logs(tmp_path: Path, arms: dict[str, Requests], shared: int) -> Path:
    """Both arms as production log lines; users below `shared` carry the same id in both."""
    lines = ["version,unit_id,latency_ms,clicked,completed,event_time"]
    for index, (ref, arm) in enumerate(arms.items()):
        for u, ms, click, done in zip(
            arm.unit, arm.latency, arm.clicked, arm.completed, strict=True
        ):
            user = f"user-{u:03d}" if u < shared else f"user-{index}-{u:03d}"
            lines.append(
                f"{ref},{user},{float(ms)!r},{str(click).lower()},"
                f"{str(done).lower()},2026-11-20T10:00:00Z"
            )
    path = tmp_path / "logs.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_shared_units_are_left_out_of_both_arms_and_reported(demo_db: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    arms = {ref: simulate_arm(Traffic(units=150), rng) for ref in REFS}
    path = _logs(tmp_path, arms, shared=30)
    settings = Settings.from_env({"PROMPTLAB_DB": str(demo_db), "PROMPTLAB_AUTHOR": "tester"})
    with Workbench.open(settings) as wb:
        wb.analysis.import_logs(path)
        found = wb.analysis.compare_versions(*REFS, logs=True, sequential=False)
        kept = wb.analysis.compare_versions(*REFS, logs=True, sequential=False, keep_shared=True)
    (name_a, a), (name_b, b) = arms.items()
    assert found.shared_units == 30 and kept.shared_units == 30
    assert found.notes == [
        f"30 units were seen under both {name_a} and {name_b} and left out of the comparison "
        "(a unit must see one version; --keep-shared keeps them)"
    ]
    assert "kept in both arms as asked" in kept.notes[0]
    # Left out: exactly the harness's arms without users 0..29, row for row.
    requests_a = int((a.unit >= 30).sum())
    requests_b = int((b.unit >= 30).sum())
    assert found.arms == {name_a: (120, requests_a), name_b: (120, requests_b)}
    assert kept.arms == {name_a: (150, a.unit.size), name_b: (150, b.unit.size)}

    def without(arm: Requests) -> Requests:
        keep = arm.unit >= 30
        fields = ("unit", "time", "completed", "shown", "clicked", "latency")
        cut = {f: getattr(arm, f)[keep] for f in fields}
        return Requests(**cut, units=arm.units - 30)

    expected = compare_arms(
        arm_sample(name_a, without(a)), arm_sample(name_b, without(b)), look=FINAL
    )
    for got, want in zip(found.rows, expected, strict=True):
        assert (got.metric, got.n_control, got.n_variant) == (
            want.metric,
            want.n_control,
            want.n_variant,
        )
        assert got.effect == pytest.approx(want.effect)


def test_compare_says_so_in_text_and_json(demo_db: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    arms = {ref: simulate_arm(Traffic(units=120), rng) for ref in REFS}
    path = _logs(tmp_path, arms, shared=7)
    env = {"PROMPTLAB_DB": str(demo_db), "PROMPTLAB_AUTHOR": "tester"}
    runner = CliRunner()
    imported = runner.invoke(main, ["logs", "import", str(path)], env=env)
    assert imported.exit_code == 0, imported.output
    text = runner.invoke(main, ["compare", *REFS, "--logs"], env=env)
    assert text.exit_code == 0, text.output
    assert "note: 7 units were seen under both" in text.output
    as_json = runner.invoke(main, ["compare", *REFS, "--logs", "--keep-shared", "--json"], env=env)
    found = json.loads(as_json.output)
    assert found["shared_units"] == 7 and found["arms"][REFS[0]]["units"] == 120
    assert "kept in both arms as asked" in found["notes"][0]


def test_unit_keys_cut_every_per_unit_array_alike() -> None:
    rng = np.random.default_rng(4)
    a = arm_sample("A", simulate_arm(Traffic(units=50), rng))
    b = arm_sample("B", simulate_arm(Traffic(units=40), rng))
    a = a.__class__(
        **{
            **a.__dict__,
            "unit_keys": np.arange(50, dtype=np.uint64),
            "unit_requests": a.rates["completion rate"].den,
        }
    )
    b = b.__class__(
        **{
            **b.__dict__,
            "unit_keys": np.arange(45, 85, dtype=np.uint64),
            "unit_requests": b.rates["completion rate"].den,
        }
    )
    assert shared_units(a, b) == 5
    cut_a, cut_b, count = without_shared(a, b)
    assert count == 5 and cut_a.units == 45 and cut_b.units == 35
    assert cut_a.rates["CTR"].num.size == 45 and int(cut_a.latency_unit.max()) == 44
    assert cut_b.requests == b.requests - int(b.rates["completion rate"].den[:5].sum())
    # Latencies of the units left out are gone, the others keep their values.
    assert np.array_equal(cut_a.latency, a.latency[a.latency_unit < 45])


def test_kept_shared_units_pull_the_effect_to_zero_left_out_they_do_not() -> None:
    """The harness behind bench/aa.py's contamination figures: 30% of B's users also in
    A, half of each one's requests logged under the other version."""
    figures = contamination_effects(60, Traffic(units=300), lift=0.6, share=0.3)
    assert figures.effect_kept < 0.8 * figures.effect_clean
    assert figures.effect_left_out == pytest.approx(figures.effect_clean, rel=0.15)
