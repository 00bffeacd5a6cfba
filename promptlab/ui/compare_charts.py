"""The Compare page's Charts tab: the forest of a comparison, then the rates, the latency
percentiles (with the comparison's per-unit intervals), the latency ECDF and the series
over time, one colour per variant or version in all of them (promptlab/views/forest.py
and promptlab/views/charts.py draw them). Every interval is at the comparison's one
level (its look's: `interval_level`), said in each figure's title as in the Answer
tab's header. The page runs this only while the tab is open: its reads (latencies, the
series over time) and its Plotly figures cost a first view nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

from promptlab.facades.analysis import Comparison, TimeSeries
from promptlab.records import LogMetricsRow, MetricsRow
from promptlab.views.charts import (
    colour_map,
    latency_ecdf_chart,
    latency_percentiles_chart,
    over_time_chart,
    rate_chart,
)
from promptlab.views.compare import cache_note, interval_level
from promptlab.views.forest import forest_chart
from promptlab.workbench import Workbench


def forest(comparison: Comparison, colours: dict[str, str]) -> None:
    figure = forest_chart(comparison.rows, colours, interval_level(comparison.method))
    st.plotly_chart(figure, width="stretch", key="chart_forest")


def charts(
    rows: Sequence[MetricsRow | LogMetricsRow],
    colours: dict[str, str],
    comparison: Comparison | None = None,
    over_time: tuple[dict[str, Any], TimeSeries] | None = None,
) -> None:
    """Rates and latency percentiles (with the comparison's per-unit intervals), then
    the latency ECDF and the series over time when given: `over_time` = (latencies per
    name, time series)."""
    arms = comparison.rows if comparison is not None else []
    level = interval_level(comparison.method) if comparison is not None else "95%"
    left, right = st.columns(2)
    figure = rate_chart(rows, colours=colours, arms=arms, level=level)
    left.plotly_chart(figure, width="stretch", key="chart_rates")
    figure = latency_percentiles_chart(rows, colours=colours, arms=arms, level=level)
    right.plotly_chart(figure, width="stretch", key="chart_latency")
    if note := cache_note(rows):
        right.caption(note)
    if over_time is None:
        return
    samples, series = over_time
    left, right = st.columns(2)
    left.plotly_chart(latency_ecdf_chart(samples, colours), width="stretch", key="chart_ecdf")
    right.plotly_chart(over_time_chart(series, colours), width="stretch", key="chart_time")


def run_charts(
    wb: Workbench, run_id: str, variants: list[str], comparison: Comparison | None
) -> None:
    """The forest of the comparison (None: a run of one variant), then the run's figures."""
    # The run's own order: swapping control does not swap the colours.
    colours = colour_map(variants)
    if comparison is None:
        shown, metrics = variants, wb.analysis.metrics(run_id=run_id)
    else:
        forest(comparison, colours)
        shown = [comparison.control, *dict.fromkeys(r.variant for r in comparison.rows)]
        # The comparison's own per-variant metrics: reading them again doubles the page's
        # heaviest query (a million results and their feedback).
        metrics = comparison.metrics
    rows = [m for m in metrics if m.variant in shown]
    samples = {name: wb.analysis.latencies(run_id, name) for name in shown}
    charts(rows, colours, comparison, (samples, wb.analysis.metrics_over_time(run_id)))


def version_charts(
    wb: Workbench, comparison: Comparison, names: tuple[str, str], logs: bool, since: str | None
) -> None:
    """The forest, then the figures of the results across runs or of the logs (these with
    the latency ECDF and the series over time)."""
    colours = colour_map(list(names))
    forest(comparison, colours)
    if not logs:
        charts(comparison.metrics, colours, comparison)
        return
    samples = {name: wb.analysis.log_latencies(name, since) for name in names}
    series = wb.analysis.log_metrics_over_time(list(names), since)
    charts(comparison.logs, colours, comparison, (samples, series))
