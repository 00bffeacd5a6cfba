"""Plotly figures of a comparison: the traces carry the given rows' values and intervals,
each name in its own colour in every figure, axes say their unit and which way is better."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from promptlab.analysis.stats import Interval, MetricComparison, Verdict, wilson_interval
from promptlab.records import MetricsRow
from promptlab.store.timeseries import TimeBucket, TimeSeries, bucket_unit
from promptlab.views.charts import (
    ECDF_POINTS,
    PALETTE,
    colour_map,
    ecdf_points,
    latency_ecdf_chart,
    latency_percentiles_chart,
    over_time_chart,
    rate_chart,
    trace_colour,
)
from promptlab.views.forest import VERDICT_COLOURS, forest_chart


def metrics_row(
    variant: str,
    completed: int,
    finished: int,
    p50: float | None = 100.0,
    p90: float | None = 200.0,
    p99: float | None = 300.0,
) -> MetricsRow:
    return MetricsRow(
        run_id="run_x",
        variant=variant,
        prompt_name="p",
        prompt_version="1.0.0",
        prompt_version_id="v" * 20,
        model="sim:fast",
        runs=1,
        finished=finished,
        succeeded=finished,
        failed=0,
        cancelled=0,
        open=0,
        completed=completed,
        failed_by_kind={},
        latency_mean_ms=p50,
        latency_p50_ms=p50,
        latency_p90_ms=p90,
        latency_p95_ms=p90,
        latency_p99_ms=p99,
        input_tokens=0,
        output_tokens=0,
        cost_usd=0.0,
        first_finished_at=None,
        last_finished_at=None,
    )


@dataclass(frozen=True)
class WithCtr:
    """A row with the click-through fields the feedback branch adds to MetricsRow."""

    label: str
    ctr: float | None
    ctr_low: float | None
    ctr_high: float | None


def test_colour_map_gives_each_name_one_colour_in_first_seen_order() -> None:
    colours = colour_map(["control", "staging", "control", "next"])
    assert list(colours) == ["control", "staging", "next"]
    assert list(colours.values()) == list(PALETTE[:3])
    assert len(set(PALETTE)) == len(PALETTE)
    # More names than colours: the palette repeats rather than failing.
    many = colour_map([f"v{i}" for i in range(len(PALETTE) + 1)])
    assert many[f"v{len(PALETTE)}"] == PALETTE[0]


def test_rate_chart_bars_carry_rates_and_wilson_error_bars() -> None:
    rows = [metrics_row("control", 30, 40), metrics_row("staging", 9, 10)]
    colours = {"control": "#111111", "staging": "#222222"}
    figure = rate_chart(rows, colours=colours)
    # A bar per variant (its colour), a group per rate.
    assert [t.name for t in figure.data] == ["control", "staging"]
    assert [t.marker.color for t in figure.data] == ["#111111", "#222222"]
    for bar, (n_ok, n) in zip(figure.data, ((30, 40), (9, 10)), strict=True):
        assert list(bar.x) == ["completion rate"]
        (y,) = bar.y
        assert y == pytest.approx(n_ok / n)
        ci = wilson_interval(n_ok, n)
        assert bar.error_y.array[0] == pytest.approx(ci.high - y)
        assert bar.error_y.arrayminus[0] == pytest.approx(y - ci.low)
        assert bar.error_y.symmetric is False
    assert "higher is better" in figure.layout.yaxis.title.text
    assert figure.layout.barmode == "group"


def test_rate_chart_skips_a_metric_no_row_carries_and_plots_one_that_is_there() -> None:
    ctr = ("CTR", "ctr", "ctr_low", "ctr_high")
    completion_only = rate_chart([metrics_row("a", 1, 2)], [ctr])
    assert [list(t.x) for t in completion_only.data] == [[]]  # MetricsRow has no ctr: left out
    figure = rate_chart([WithCtr("a", 0.1, 0.05, 0.2), WithCtr("b", None, None, None)], [ctr])  # type: ignore[list-item]
    assert [list(t.y) for t in figure.data] == [[0.1], [None]]
    assert figure.data[0].error_y.array[0] == pytest.approx(0.1)
    assert figure.data[1].error_y.arrayminus[0] is None


def arm_row(
    metric: str, value_a: float, value_b: float, a: Interval, b: Interval, latency: bool
) -> MetricComparison:
    return MetricComparison(
        metric,
        "b",
        "a",
        value_a,
        value_b,
        30,
        30,
        value_b - value_a,
        None,
        0.5,
        "test",
        lower_is_better=latency,
        control_interval=a,
        variant_interval=b,
    )


def test_rate_chart_takes_values_and_intervals_from_the_comparison() -> None:
    """The comparison's interval is per unit (a Wilson interval of requests is too narrow
    when a unit sends many): the bars show the comparison's."""
    rows = [metrics_row("a", 30, 40), metrics_row("b", 9, 10)]
    compared = [
        arm_row(
            "completion rate", 0.75, 0.9, Interval(0.6, 0.85), Interval(0.7, 0.95), latency=False
        )
    ]
    figure = rate_chart(rows, arms=compared)
    a, b = figure.data
    assert a.error_y.array[0] == pytest.approx(0.10) and a.error_y.arrayminus[0] == pytest.approx(
        0.15
    )
    assert b.error_y.array[0] == pytest.approx(0.05) and b.error_y.arrayminus[0] == pytest.approx(
        0.2
    )


def test_latency_percentiles_have_a_bar_per_variant_with_interval_bars() -> None:
    rows = [metrics_row("a", 1, 1, 10, 20, 30), metrics_row("b", 1, 1, 12, 25, 40)]
    compared = [
        arm_row("latency p50", 10.0, 12.0, Interval(8, 11), Interval(11, 15), latency=True),
        arm_row("latency p90", 20.0, 25.0, Interval(18, 24), Interval(20, 30), latency=True),
        arm_row("latency p99", 30.0, 40.0, Interval(25, 35), Interval(30, 55), latency=True),
    ]
    figure = latency_percentiles_chart(
        rows, colours={"a": "#0a0a0a", "b": "#0b0b0b"}, arms=compared
    )
    a, b = figure.data
    assert (a.name, b.name) == ("a", "b")
    assert (a.marker.color, b.marker.color) == ("#0a0a0a", "#0b0b0b")
    assert list(a.x) == ["p50", "p90", "p99"]
    assert list(a.y) == [10, 20, 30] and list(b.y) == [12, 25, 40]
    assert list(a.error_y.array) == pytest.approx([1, 4, 5])
    assert list(a.error_y.arrayminus) == pytest.approx([2, 2, 5])
    assert list(b.error_y.array) == pytest.approx([3, 5, 15])
    assert list(b.error_y.arrayminus) == pytest.approx([1, 5, 10])
    assert figure.layout.barmode == "group"
    assert "ms" in figure.layout.yaxis.title.text
    assert "lower is better" in figure.layout.yaxis.title.text


def test_latency_percentiles_without_a_comparison_have_no_interval() -> None:
    rows = [metrics_row("a", 1, 1, 10, 20, 30), metrics_row("b", 1, 1, None, None, None)]
    figure = latency_percentiles_chart(rows)
    assert [list(t.y) for t in figure.data] == [[10, 20, 30], [None, None, None]]
    assert list(figure.data[0].error_y.array) == [None, None, None]


def test_ecdf_steps_to_one_and_thins_large_samples() -> None:
    xs, ys = ecdf_points(np.array([3.0, 1.0, 2.0]))
    assert xs == [1.0, 2.0, 3.0] and ys == pytest.approx([1 / 3, 2 / 3, 1.0])
    big = np.arange(100_000, dtype=np.float64)
    xs, ys = ecdf_points(big)
    assert len(xs) == ECDF_POINTS and ys[-1] == 1.0 and xs[-1] == 99_999
    assert ecdf_points(np.array([])) == ([], [])
    figure = latency_ecdf_chart(
        {"a": np.array([5.0, 1.0]), "b": np.array([2.0])}, colours={"a": "#0a0a0a", "b": "#0b0b0b"}
    )
    assert [t.name for t in figure.data] == ["a", "b"]
    assert [t.line.color for t in figure.data] == ["#0a0a0a", "#0b0b0b"]
    assert list(figure.data[0].x) == [1.0, 5.0] and list(figure.data[0].y) == [0.5, 1.0]
    assert "lower is better" in figure.layout.xaxis.title.text
    assert "ms" in figure.layout.xaxis.title.text


def test_over_time_has_a_completion_and_a_latency_line_per_variant() -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    t1 = t0 + timedelta(minutes=1)
    series = TimeSeries(
        "run_x",
        "minute",
        [
            TimeBucket("a", t0, 4, 3, 120.0),
            TimeBucket("b", t0, 2, 2, None),
            TimeBucket("a", t1, 5, 5, 130.0),
        ],
    )
    figure = over_time_chart(series, colours={"b": "#0b0b0b", "a": "#0a0a0a"})
    by_axis = {(t.name, t.yaxis): t for t in figure.data}
    assert list(by_axis[("a", "y")].y) == [0.75, 1.0]
    assert list(by_axis[("a", "y2")].y) == [120.0, 130.0]
    assert list(by_axis[("b", "y2")].y) == [None]
    assert list(by_axis[("a", "y")].x) == [t0, t1]
    assert by_axis[("a", "y2")].line.color == "#0a0a0a"
    assert by_axis[("b", "y")].line.color == "#0b0b0b"
    assert "per minute" in figure.layout.title.text
    assert "higher is better" in figure.layout.yaxis.title.text
    assert "lower is better" in figure.layout.yaxis2.title.text
    assert "ms" in figure.layout.yaxis2.title.text


def test_bucket_unit_grows_with_the_span() -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    assert bucket_unit(t0, t0 + timedelta(seconds=5)) == "second"
    assert bucket_unit(t0, t0 + timedelta(hours=1)) == "minute"
    assert bucket_unit(t0, t0 + timedelta(days=2)) == "hour"
    assert bucket_unit(t0, t0 + timedelta(days=30)) == "day"
    assert bucket_unit(None, None) == "second"


def comparison(
    metric: str,
    effect: float,
    low: float,
    high: float,
    verdict: Verdict,
    latency: bool,
    variant: str = "b",
) -> MetricComparison:
    return MetricComparison(
        metric,
        variant,
        "a",
        1.0,
        1.0,
        10,
        10,
        effect,
        Interval(low, high),
        0.01,
        "test",
        lower_is_better=latency,
        adjusted_p=0.02,
        verdict=verdict,
    )


def test_forest_plots_effects_with_intervals_in_the_variants_colour() -> None:
    rows = [
        comparison("completion rate", 0.05, 0.01, 0.10, Verdict.BETTER, latency=False),
        comparison("latency p50", 20.0, 5.0, 40.0, Verdict.WORSE, latency=True),
        comparison("latency p90", -3.0, -10.0, 4.0, Verdict.UNDECIDED, latency=True),
    ]
    figure = forest_chart(rows, colours={"a": "#0a0a0a", "b": "#0b0b0b"})
    rates, latency = figure.data
    assert list(rates.x) == pytest.approx([5.0])  # percentage points
    assert list(rates.error_x.array) == pytest.approx([5.0])
    assert list(rates.error_x.arrayminus) == pytest.approx([4.0])
    assert rates.marker.color == "#0b0b0b" and latency.marker.color == "#0b0b0b"
    # The verdict in words beside each point, in its own colour.
    assert list(rates.text) == ["better"]
    assert list(rates.textfont.color) == [VERDICT_COLOURS[Verdict.BETTER]]
    assert list(latency.text) == ["worse", "not yet distinguishable"]
    assert list(latency.x) == [20.0, -3.0]
    assert list(latency.y) == ["b · latency p50", "b · latency p90"]
    assert list(latency.error_x.arrayminus) == pytest.approx([15.0, 7.0])
    assert (rates.xaxis, latency.xaxis) == ("x", "x2")  # a panel each
    assert "higher is better" in figure.layout.xaxis.title.text
    assert "pp" in figure.layout.xaxis.title.text
    assert "lower is better" in figure.layout.xaxis2.title.text
    assert "ms" in figure.layout.xaxis2.title.text


def test_the_forest_panels_leave_their_labels_room() -> None:
    """The latency panel used to sit right of the rates panel, its long y labels drawn
    over the rates panel. The panels are stacked: one column, labels in the left margin,
    no panel's plot area overlapping another's."""
    long = "a-variant-with-a-rather-long-name"
    rows = [
        comparison(m, 0.01, -0.01, 0.03, Verdict.UNDECIDED, latency=False, variant=long)
        for m in ("completion rate", "CTR")
    ] + [
        comparison(m, 5.0, -1.0, 9.0, Verdict.UNDECIDED, latency=True, variant=long)
        for m in ("latency p50", "latency p90", "latency p99")
    ]
    layout = forest_chart(rows).layout
    xs = [layout.xaxis, layout.xaxis2]
    ys = [layout.yaxis, layout.yaxis2]
    assert all(tuple(x.domain) == tuple(xs[0].domain) for x in xs)  # one column
    (low_a, high_a), (low_b, high_b) = sorted(tuple(y.domain) for y in ys)
    assert high_a < low_b  # stacked, a gap between them
    assert all(y.automargin for y in ys)  # the margin grows to fit the labels
    # Room for each label row: the latency panel (3 rows) is taller than the rates (2).
    assert ys[1].domain[1] - ys[1].domain[0] > ys[0].domain[1] - ys[0].domain[0]


def test_forest_with_rates_only_has_one_panel() -> None:
    rows = [comparison("completion rate", 0.05, 0.01, 0.10, Verdict.BETTER, latency=False)]
    figure = forest_chart(rows)
    assert [t.xaxis for t in figure.data] == ["x"]
    assert "xaxis2" not in figure.layout.to_plotly_json()


def figure_colours(figures: list[Any]) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for figure in figures:
        for trace in figure.data:
            name = trace.legendgroup or trace.name
            seen.setdefault(name, set()).add(str(trace_colour(trace)))
    return seen


def test_one_colour_map_colours_a_name_alike_in_every_figure() -> None:
    colours = colour_map(["a", "b"])
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [metrics_row("a", 3, 4), metrics_row("b", 1, 4)]
    figures = [
        rate_chart(rows, colours=colours),
        latency_percentiles_chart(rows, colours=colours),
        latency_ecdf_chart({"a": np.array([1.0]), "b": np.array([2.0])}, colours=colours),
        over_time_chart(
            TimeSeries("", "day", [TimeBucket("a", t0, 1, 1, 1.0), TimeBucket("b", t0, 1, 1, 1.0)]),
            colours=colours,
        ),
        forest_chart(
            [comparison("CTR", 0.1, 0.0, 0.2, Verdict.UNDECIDED, latency=False)], colours=colours
        ),
    ]
    assert figure_colours(figures) == {"a": {colours["a"]}, "b": {colours["b"]}}


def test_forest_rows_without_an_interval_get_no_error_bar() -> None:
    row = comparison("CTR", 0.3, 0.0, 0.0, Verdict.TOO_FEW, latency=False)
    figure = forest_chart([replace(row, interval=None)])
    (trace,) = figure.data
    assert list(trace.x) == pytest.approx([30.0]) and list(trace.text) == ["too few units"]
    assert trace.error_x.visible is False
