"""Plotly figures of a comparison: the traces carry the given rows' values and intervals."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from promptlab.analysis.stats import Interval, MetricComparison, Verdict, wilson_interval
from promptlab.records import MetricsRow
from promptlab.store.timeseries import TimeBucket, TimeSeries, bucket_unit
from promptlab.views.charts import (
    ECDF_POINTS,
    VERDICT_COLOURS,
    ecdf_points,
    forest_chart,
    latency_ecdf_chart,
    latency_percentiles_chart,
    over_time_chart,
    rate_chart,
)


def metrics_row(
    variant: str,
    completed: int,
    finished: int,
    p50: float | None = 100.0,
    p90: float | None = 200.0,
    p99: float | None = 300.0,
) -> MetricsRow:
    return MetricsRow(
        run_id="run_x", variant=variant, prompt_name="p", prompt_version="1.0.0",
        prompt_version_id="v" * 20, model="sim:fast", runs=1, finished=finished,
        succeeded=finished, failed=0, cancelled=0, open=0, completed=completed,
        failed_by_kind={}, latency_mean_ms=p50, latency_p50_ms=p50, latency_p90_ms=p90,
        latency_p95_ms=p90, latency_p99_ms=p99, input_tokens=0, output_tokens=0, cost_usd=0.0,
        first_finished_at=None, last_finished_at=None,
    )  # fmt: skip


@dataclass(frozen=True)
class WithCtr:
    """A row with the click-through fields the feedback branch adds to MetricsRow."""

    label: str
    ctr: float | None
    ctr_low: float | None
    ctr_high: float | None


def test_rate_chart_bars_carry_rates_and_wilson_error_bars() -> None:
    rows = [metrics_row("control", 30, 40), metrics_row("staging", 9, 10)]
    figure = rate_chart(rows)
    assert len(figure.data) == 1
    bar = figure.data[0]
    assert bar.name == "completion rate"
    assert list(bar.x) == ["control", "staging"]
    assert list(bar.y) == [0.75, 0.9]
    for n_ok, n, y, plus, minus in zip(
        (30, 9), (40, 10), bar.y, bar.error_y.array, bar.error_y.arrayminus, strict=True
    ):
        ci = wilson_interval(n_ok, n)
        assert plus == pytest.approx(ci.high - y) and minus == pytest.approx(y - ci.low)
    assert bar.error_y.symmetric is False


def test_rate_chart_skips_a_metric_no_row_carries_and_plots_one_that_is_there() -> None:
    ctr = ("CTR", "ctr", "ctr_low", "ctr_high")
    completion_only = rate_chart([metrics_row("a", 1, 2)], [ctr])
    assert len(completion_only.data) == 0  # MetricsRow has no ctr (yet): left out
    figure = rate_chart([WithCtr("a", 0.1, 0.05, 0.2), WithCtr("b", None, None, None)], [ctr])  # type: ignore[list-item]
    assert list(figure.data[0].y) == [0.1, None]
    assert figure.data[0].error_y.array[0] == pytest.approx(0.1)
    assert figure.data[0].error_y.arrayminus[1] is None


def test_latency_percentiles_are_grouped_bars_per_variant() -> None:
    rows = [metrics_row("a", 1, 1, 10, 20, 30), metrics_row("b", 1, 1, None, None, None)]
    figure = latency_percentiles_chart(rows)
    assert [t.name for t in figure.data] == ["p50", "p90", "p99"]
    assert [list(t.y) for t in figure.data] == [[10, None], [20, None], [30, None]]
    assert figure.layout.barmode == "group"


def test_ecdf_steps_to_one_and_thins_large_samples() -> None:
    xs, ys = ecdf_points(np.array([3.0, 1.0, 2.0]))
    assert xs == [1.0, 2.0, 3.0] and ys == pytest.approx([1 / 3, 2 / 3, 1.0])
    big = np.arange(100_000, dtype=np.float64)
    xs, ys = ecdf_points(big)
    assert len(xs) == ECDF_POINTS and ys[-1] == 1.0 and xs[-1] == 99_999
    assert ecdf_points(np.array([])) == ([], [])
    figure = latency_ecdf_chart({"a": np.array([5.0, 1.0]), "b": np.array([2.0])})
    assert [t.name for t in figure.data] == ["a", "b"]
    assert list(figure.data[0].x) == [1.0, 5.0] and list(figure.data[0].y) == [0.5, 1.0]


def test_over_time_has_a_completion_and_a_latency_line_per_variant() -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    t1 = t0 + timedelta(minutes=1)
    series = TimeSeries("run_x", "minute", [
        TimeBucket("a", t0, 4, 3, 120.0), TimeBucket("b", t0, 2, 2, None),
        TimeBucket("a", t1, 5, 5, 130.0),
    ])  # fmt: skip
    figure = over_time_chart(series)
    by_axis = {(t.name, t.yaxis): t for t in figure.data}
    assert list(by_axis[("a", "y")].y) == [0.75, 1.0]
    assert list(by_axis[("a", "y2")].y) == [120.0, 130.0]
    assert list(by_axis[("b", "y2")].y) == [None]
    assert list(by_axis[("a", "y")].x) == [t0, t1]
    assert "per minute" in figure.layout.title.text


def test_bucket_unit_grows_with_the_span() -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    assert bucket_unit(t0, t0 + timedelta(seconds=5)) == "second"
    assert bucket_unit(t0, t0 + timedelta(hours=1)) == "minute"
    assert bucket_unit(t0, t0 + timedelta(days=2)) == "hour"
    assert bucket_unit(t0, t0 + timedelta(days=30)) == "day"
    assert bucket_unit(None, None) == "second"


def comparison(
    metric: str, effect: float, low: float, high: float, verdict: Verdict, latency: bool
) -> MetricComparison:
    return MetricComparison(
        metric, "b", "a", 1.0, 1.0, 10, 10, effect, Interval(low, high), 0.01, "test",
        lower_is_better=latency, adjusted_p=0.02, verdict=verdict,
    )  # fmt: skip


def test_forest_plots_effects_with_intervals_coloured_by_verdict() -> None:
    rows = [
        comparison("completion rate", 0.05, 0.01, 0.10, Verdict.BETTER, latency=False),
        comparison("latency p50", 20.0, 5.0, 40.0, Verdict.WORSE, latency=True),
        comparison("latency p90", -3.0, -10.0, 4.0, Verdict.UNDECIDED, latency=True),
    ]
    figure = forest_chart(rows)
    traces = {t.name: t for t in figure.data}
    better = traces["better"]
    assert list(better.x) == pytest.approx([5.0])  # percentage points
    assert list(better.error_x.array) == pytest.approx([5.0])
    assert list(better.error_x.arrayminus) == pytest.approx([4.0])
    assert better.marker.color == VERDICT_COLOURS[Verdict.BETTER]
    assert better.xaxis == "x"  # the rates panel
    worse = traces["worse"]
    assert list(worse.x) == [20.0] and list(worse.y) == ["b · latency p50"]
    assert worse.xaxis == "x2" and worse.marker.color == VERDICT_COLOURS[Verdict.WORSE]
    assert list(traces["not yet distinguishable"].error_x.arrayminus) == pytest.approx([7.0])
