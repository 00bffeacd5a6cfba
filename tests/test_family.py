"""A comparison's fixed family (promptlab/records/family.py): the declared metrics times
the variants compared, whatever the view shows or could test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from promptlab.analysis.stats import Interval, MetricComparison, Verdict, holm_verdicts
from promptlab.engine.spec.runspec import SpecError, parse_spec
from promptlab.records import RunStatus
from promptlab.records.family import default_family, family_of, parse_family
from promptlab.workbench import Workbench


def row(metric: str, variant: str, p: float, verdict: Verdict | None = None) -> MetricComparison:
    found = MetricComparison(
        metric=metric,
        variant=variant,
        control="control",
        control_value=0.5,
        variant_value=0.6,
        n_control=500,
        n_variant=500,
        effect=0.1,
        interval=Interval(0.01, 0.19),
        p_value=p,
        test="delta method per unit",
        lower_is_better=False,
        requests_control=500,
        requests_variant=500,
        analysed_by="unit",
    )
    return found if verdict is None else MetricComparison(**{**found.__dict__, "verdict": verdict})


def test_rows_that_cannot_be_tested_still_count_in_a_declared_family() -> None:
    family = default_family().metrics  # five metrics
    one = holm_verdicts([row("completion rate", "b", 0.004)], family=family)
    assert one[0].adjusted_p == pytest.approx(0.02)  # 5 x 0.004: the family is five tests
    assert "Holm over 5 tests" in one[0].reason
    # A too-few row next to it changes nothing; without a family, it would (1 test).
    too_few = row("latency p99", "b", 1.0, Verdict.TOO_FEW)
    both = holm_verdicts([row("completion rate", "b", 0.004), too_few], family=family)
    assert both[0].adjusted_p == one[0].adjusted_p
    assert holm_verdicts([row("completion rate", "b", 0.004), too_few])[0].adjusted_p == 0.004
    # Two variants against control: ten tests, whichever rows are handed in.
    assert holm_verdicts([row("completion rate", "b", 0.004)], family=family, variants=2)[
        0
    ].adjusted_p == pytest.approx(0.04)


def test_a_metric_outside_the_declared_family_is_exploratory() -> None:
    family = parse_family({"primary": "CTR", "guardrails": ["latency p90"]}, [])
    rows = holm_verdicts(
        [row("completion rate", "b", 1e-6), row("CTR", "b", 0.01)], family=family.metrics
    )
    assert rows[0].verdict == Verdict.UNDECIDED and rows[0].adjusted_p is None
    assert rows[0].reason.startswith("exploratory: not a declared metric")
    assert rows[1].adjusted_p == pytest.approx(0.02) and rows[1].verdict == Verdict.BETTER


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"primary": "clicks"}, r"metrics.primary: 'clicks' is not a metric compare tests"),
        ({"primary": "ctr", "guardrails": ["latency p95"]}, r"metrics.guardrails\[0\]"),
        ({"primary": "ctr", "guardrails": ["CTR"]}, "each metric once"),
        ({"guardrails": ["ctr"]}, r"expected \{primary: METRIC"),
        ({"primary": "score: exact"}, "'score: exact' is not a metric"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_field(
    tmp_path: Path, metrics: object, message: str
) -> None:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\nhi\n")
    spec = {"dataset": str(dataset), "variants": [{"prompt": "p"}], "metrics": metrics}
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)


def test_scores_of_declared_scorers_can_be_declared() -> None:
    spec = {
        "expected": "answer",
        "scorers": ["exact", {"kind": "contains", "name": "has it"}],
        "metrics": {"primary": "score: exact", "guardrails": ["score:has it", "completion"]},
    }
    family = family_of(spec)
    assert family.metrics == ("score: exact", "score: has it", "completion rate")
    assert family.declared
    assert family_of({"expected": "a", "scorers": ["exact"]}).guardrails[-1] == "score: exact"


@pytest.fixture
def three_variant_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Workbench, str]]:
    providers = tmp_path / "providers.yaml"
    # A twentieth of the models' latencies: they differ by model, so p50 rows are tested.
    providers.write_text("endpoints:\n  sim: {latency_scale: 0.05, rpm: 1000000}\n")
    monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"ticket number {i} is late\n" for i in range(200)))
    messages = [{"role": "user", "content": "Answer briefly: {{ text }}"}]
    variants = [
        {"name": name, "messages": messages, "model": model, "params": {"max_tokens": 32}}
        for name, model in (("a", "sim:fast"), ("b", "sim:careful"), ("c", "sim:pocket"))
    ]
    with Workbench.open() as wb:
        run_id = wb.runs.start(
            parse_spec({"name": "three", "dataset": str(dataset), "variants": variants})
        )
        assert wb.runs.wait(run_id, 120).status == RunStatus.COMPLETED
        yield wb, run_id


def test_picking_one_variant_never_changes_a_p_value(
    three_variant_run: tuple[Workbench, str],
) -> None:
    wb, run_id = three_variant_run
    whole = wb.analysis.compare(run_id)
    picked = wb.analysis.compare(run_id, "a", "c")
    assert {r.variant for r in picked.rows} == {"c"} and set(picked.arms) == {"a", "c"}
    tested = [r for r in whole.rows if r.variant == "c" and r.adjusted_p is not None]
    assert tested, "some row of c was tested"
    for mine, theirs in zip(
        tested, [r for r in picked.rows if r.adjusted_p is not None], strict=True
    ):
        assert (mine.metric, mine.adjusted_p, mine.verdict) == (
            theirs.metric,
            theirs.adjusted_p,
            theirs.verdict,
        )
    # Five declared metrics for two variants: ten tests, whichever row is shown.
    decided = [r for r in picked.rows if r.adjusted_p is not None and r.p_value < 0.01]
    assert decided, [r.reason for r in picked.rows]
    assert all("Holm over 10 tests" in r.reason for r in decided)
    assert picked.family.primary == "completion rate" and not picked.family.declared


def test_an_experiment_declares_its_metrics_and_planned_units(tmp_path: Path) -> None:
    """An experiment file's `metrics:` and `planned_units:` travel with its revision into
    every run of it: compare decides on them (issue 40)."""
    from promptlab.config import Settings
    from promptlab.experiments import load_experiment_file

    source = tmp_path / "exp.yaml"
    source.write_text(
        "name: decided\nunit_column: customer_id\nplanned_units: 150\n"
        "metrics: {primary: latency p50, guardrails: [completion]}\nvariants:\n"
        "  - {name: control, prompt: ticket-triage@production, weight: 50, control: true}\n"
        "  - {name: staging, prompt: ticket-triage@staging, weight: 50}\n"
    )
    settings = Settings.from_env(
        {"PROMPTLAB_DB": str(tmp_path / "db.duckdb"), "PROMPTLAB_AUTHOR": "tester"}
    )
    with Workbench.open(settings) as wb:
        wb.demo.load()
        config, _ = wb.experiments.add(load_experiment_file(source))
        assert (config.planned_units, config.metrics) == (
            150,
            {"primary": "latency p50", "guardrails": ["completion"]},
        )
        spec = wb.runs.experiment_spec("decided", "tickets", limit_rows=6)
        run_id = wb.runs.start(spec)
        assert wb.runs.wait(run_id, 60).status == RunStatus.COMPLETED
        live = wb.analysis.compare(run_id, sequential=True)
    assert live.family.primary == "latency p50" and live.family.declared
    assert live.family.metrics == ("latency p50", "completion rate")
    assert live.planned_units == 150  # the declaration, not the run's own units


@pytest.mark.parametrize("value", [0, -3, 1.5, "many", True])
def test_a_bad_planned_units_is_refused_naming_the_field(tmp_path: Path, value: object) -> None:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\nhi\n")
    spec = {"dataset": str(dataset), "variants": [{"prompt": "p"}], "planned_units": value}
    with pytest.raises(SpecError, match=r"planned_units: expected a whole number of units"):
        parse_spec(spec)
