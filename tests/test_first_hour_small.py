"""Issue 43's small items: the over-time chart breaks its lines at a pause, a latency
row short of tail requests says so in its verdict as in its why, and the answer sentence
and the sample-size line state units per arm in the same terms."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from promptlab.analysis.compare import Comparison
from promptlab.analysis.stats import Interval, MetricComparison, Verdict
from promptlab.cli import main
from promptlab.store.timeseries import TimeBucket, TimeSeries
from promptlab.views.charts import over_time_chart, with_gaps
from promptlab.views.compare import (
    answer_sentences,
    comparison_cells,
    summary_rows,
    units_needed,
    units_needed_text,
    verdict_text,
)
from promptlab.views.forest import forest_chart

T0 = datetime(2026, 11, 1, tzinfo=UTC)
#: "N units per arm ... (M more than the smaller arm's K)", as both sentences put it.
PER_ARM = re.compile(r"(\d+) (\w+) per arm\b.*?(\d+) more than the smaller arm's (\d+)\)")


def minutes(*offsets: int, variant: str = "a") -> list[TimeBucket]:
    return [TimeBucket(variant, T0 + timedelta(minutes=m), 4, 3, 100.0 + m) for m in offsets]


# ---- (a) the over-time chart breaks at a pause ---------------------------------------


def test_a_pause_breaks_each_line_of_the_over_time_chart() -> None:
    series = TimeSeries("run_x", "minute", minutes(0, 1, 7, 8))
    for trace in over_time_chart(series).data:
        # The gap's point sits one bucket after the last before the pause, its value None.
        assert list(trace.x) == [T0 + timedelta(minutes=m) for m in (0, 1, 2, 7, 8)]
        assert [y is None for y in trace.y] == [False, False, True, False, False]
        assert trace.connectgaps is False


def test_a_series_without_a_pause_has_no_gap() -> None:
    series = TimeSeries("run_x", "minute", minutes(0, 1, 2) + minutes(0, 2, variant="b"))
    by_axis = {(t.name, t.yaxis): t for t in over_time_chart(series).data}
    assert None not in by_axis[("a", "y")].y and None not in by_axis[("a", "y2")].y
    # b skipped a minute: a pause of its own, whatever a does meanwhile.
    assert list(by_axis[("b", "y")].y) == [0.75, None, 0.75]


def test_a_day_across_a_clock_change_is_no_pause() -> None:
    days = [TimeBucket("a", T0, 1, 1, 1.0), TimeBucket("a", T0 + timedelta(hours=25), 1, 1, 1.0)]
    assert [bucket for _, bucket in with_gaps(days, "day")] == days
    two_days = [days[0], replace(days[1], start=T0 + timedelta(days=2))]
    assert [bucket for _, bucket in with_gaps(two_days, "day")] == [days[0], None, two_days[1]]


# ---- (b) a thin tail says so in the verdict, as in the why ---------------------------


def tail_row(quantile: str = "p99") -> MetricComparison:
    return MetricComparison(
        f"latency {quantile}",
        "b",
        "a",
        1800.0,
        1900.0,
        120,
        110,
        100.0,
        None,
        1.0,
        "delta method (quantile)",
        True,
        None,
        Verdict.TOO_FEW,
        reason=f"too few requests beyond {quantile} (2; a verdict needs 20 in each arm)",
    )


def test_a_thin_tail_row_says_too_few_requests_in_its_verdict_and_its_why() -> None:
    row = tail_row()
    comparison = Comparison("run_x", "split", "a", False, [row], None, [])
    cells = comparison_cells(row)
    assert cells[11] == "too few requests beyond p99" and cells[-1].startswith(cells[11])
    assert summary_rows(comparison)[0]["verdict"] == "too few requests beyond p99"
    assert list(forest_chart([row]).data[0].text) == ["too few requests beyond p99"]
    (sentence,) = answer_sentences(comparison)
    assert "too few requests beyond p99 to judge latency p99" in sentence
    assert "too few units" not in sentence
    # Units enough: no "more units" to ask for, the tail is what is short.
    assert sentence.endswith("; too few requests beyond p99 for any verdict on latency p99.")


def test_too_few_units_still_says_units() -> None:
    row = replace(tail_row(), n_variant=5, reason="too few units (5; a verdict needs 100 per arm)")
    assert verdict_text(row) == "too few units"
    assert verdict_text(replace(row, reason="")) == "too few units"


# ---- (c) the answer and the sample size in the same terms ----------------------------


@pytest.fixture
def db(runs: tuple[Path, str, str], tmp_path: Path) -> str:
    copy = tmp_path / "small.duckdb"
    shutil.copy(runs[0], copy)
    return str(copy)


def per_arm_figures(text: str) -> tuple[int, str, int, int]:
    found = PER_ARM.search(text)
    assert found, text
    per_arm, word, more, have = found.groups()
    assert int(per_arm) - int(have) == int(more), text
    return int(per_arm), word, int(more), int(have)


@pytest.mark.parametrize(
    ("which", "answer", "sample"),
    [
        # The split run: 5 units in staging. Before: "95 more units in the smaller arm"
        # beside "152 units per arm".
        (1, (100, "units", 95, 5), (152, "units", 147, 5)),
        # The all-mode run, its observed effect the chosen -5 pp: before, "113 more rows"
        # beside "152 units per arm".
        (2, (153, "rows", 113, 40), (152, "rows", 112, 40)),
    ],
)
def test_the_answer_and_the_sample_size_state_units_per_arm_alike(
    db: str,
    runs: tuple[Path, str, str],
    which: int,
    answer: tuple[int, str, int, int],
    sample: tuple[int, str, int, int],
) -> None:
    result = CliRunner().invoke(main, ["--db", db, "compare", "--run", runs[which], "--mde", "5"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    sentence = next(line for line in lines if line.startswith("staging against control"))
    size = next(line for line in lines if line.startswith("sample size: "))
    assert per_arm_figures(sentence) == answer
    assert per_arm_figures(size) == sample


def test_the_sample_size_counts_from_the_smallest_arm_of_every_variant() -> None:
    row = MetricComparison(
        "completion rate",
        "b",
        "a",
        0.8,
        0.85,
        300,
        120,
        0.05,
        Interval(-0.05, 0.15),
        0.3,
        "delta method",
        False,
        0.3,
        Verdict.UNDECIDED,
    )
    comparison = Comparison(
        "run_x", "split", "a", False, [row, replace(row, variant="c", n_variant=90)], None, []
    )
    needed = units_needed(comparison, 5.0)
    assert needed is not None and (needed["have"], needed["unit"]) == (90, "units")
    assert per_arm_figures(units_needed_text(needed)) == (
        needed["per_arm"],
        "units",
        needed["per_arm"] - 90,
        90,
    )
