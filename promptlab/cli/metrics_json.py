"""`promptlab metrics --json` and `promptlab compare --json`: metrics rows, scores and
comparisons as plain JSON (dates as ISO text, NaN and infinities as null)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from promptlab.analysis.intervals import completion_interval, ctr_interval, score_interval
from promptlab.views.compare import answer_sentences

if TYPE_CHECKING:
    from promptlab.analysis.compare import Comparison
    from promptlab.records import LogMetricsRow, MetricsRow, ScoreCounts


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):  # NaN, inf are not JSON
        return None
    return value


def metrics_json(row: MetricsRow, scores: Sequence[ScoreCounts] = ()) -> dict[str, Any]:
    """A row as JSON, with its label's scores (a version's count every model it ran on,
    as in the text table)."""
    out = _plain(asdict(row))
    out["scores"] = [score_json(s) for s in scores if s.label == row.label]
    ci, ctr = completion_interval(row), ctr_interval(row)
    out.update(
        completion_rate=row.completion_rate,
        completion_low=ci.low if row.finished else None,
        completion_high=ci.high if row.finished else None,
        validity_rate=row.validity_rate,
        repair_rate=row.repair_rate,
        invalid_rate=row.invalid_rate,
        truncation_rate=row.truncation_rate,
        rule_failure_rate=row.rule_failure_rate,
        ctr=row.ctr,
        ctr_low=ctr.low if row.impressions else None,
        ctr_high=ctr.high if row.impressions else None,
    )
    return dict(out)


def score_json(score: ScoreCounts) -> dict[str, Any]:
    interval = score_interval(score)
    return {
        **_plain(asdict(score)),
        "mean": score.mean,
        "low": interval.low if interval else None,
        "high": interval.high if interval else None,
    }


def log_metrics_json(row: LogMetricsRow) -> dict[str, Any]:
    out = _plain(asdict(row))
    done, ctr = completion_interval(row), ctr_interval(row)
    out.update(
        label=row.label,
        completion_rate=row.completion_rate,
        completion_low=done.low if row.completion_known else None,
        completion_high=done.high if row.completion_known else None,
        ctr=row.ctr,
        ctr_low=ctr.low if row.click_known else None,
        ctr_high=ctr.high if row.click_known else None,
    )
    return dict(out)


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    srm = comparison.srm
    return {
        "run_id": comparison.run_id,
        "mode": comparison.mode,
        "control": comparison.control,
        "paired": comparison.paired,
        "method": comparison.method,
        "planned_units": comparison.planned_units,
        "shared_units": comparison.shared_units,
        "notes": comparison.notes,
        "scope": comparison.scope,
        "family": {
            "primary": comparison.family.primary,
            "guardrails": list(comparison.family.guardrails),
            "declared": comparison.family.declared,
        },
        "arms": {name: {"units": u, "requests": r} for name, (u, r) in comparison.arms.items()},
        "answer": answer_sentences(comparison),
        "rows": [_plain(asdict(r)) for r in comparison.rows],
        "srm": _plain(asdict(srm)) if srm is not None else None,
        "metrics": [metrics_json(m) for m in comparison.metrics],
        "logs": [log_metrics_json(m) for m in comparison.logs],
    }
