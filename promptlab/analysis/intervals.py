"""95% intervals of the rates the records count: completion and CTR of a metrics or
production-log row, a scorer's mean score, a replay's completed sessions.

The records are imported only when a row's kind must be told apart: the records package
brings jinja2 and jsonschema, which `promptlab metrics --help` must not load
(tests/test_startup.py)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from promptlab.analysis.stats import Interval, wilson_interval

if TYPE_CHECKING:
    from promptlab.records.metrics import LogMetricsRow, MetricsRow
    from promptlab.records.scores import ScoreCounts
    from promptlab.records.sessions import SessionMetrics

#: z of a 95% interval.
_Z95 = 1.959963984540054


def completion_interval(row: MetricsRow | LogMetricsRow) -> Interval:
    """Wilson 95% interval of the completion rate ((0, 1) with nothing counted): over
    finished results for a run or version row, over the requests that say for a log row."""
    from promptlab.records.metrics import LogMetricsRow

    if isinstance(row, LogMetricsRow):
        return wilson_interval(row.completed, row.completion_known)
    return wilson_interval(row.completed, row.finished)


def ctr_interval(row: MetricsRow | LogMetricsRow) -> Interval:
    """Wilson 95% interval of the CTR ((0, 1) with nothing counted): over impressions for
    a run or version row, over the requests that say for a log row."""
    from promptlab.records.metrics import LogMetricsRow

    if isinstance(row, LogMetricsRow):
        return wilson_interval(row.clicks, row.click_known)
    return wilson_interval(row.clicks, row.impressions)


def score_interval(score: ScoreCounts) -> Interval | None:
    """95%: Wilson's for an accuracy, else the normal one of the mean score (None with
    nothing scored)."""
    if not score.scored:
        return None
    if score.binary:
        return wilson_interval(score.right, score.scored)
    mean = score.total / score.scored
    variance = max(0.0, score.total_squares / score.scored - mean * mean)
    half = _Z95 * math.sqrt(variance / score.scored) if score.scored > 1 else 1.0
    return Interval(max(0.0, mean - half), min(1.0, mean + half))


def session_interval(row: SessionMetrics) -> Interval | None:
    """Wilson's 95% interval of the completed share (sessions are the units; None with
    no session)."""
    return wilson_interval(row.completed, row.sessions) if row.sessions else None
