"""The text tables `promptlab metrics` and `promptlab compare` print: metrics, output
checks, feedback, production logs, scores, sessions and a comparison's rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from promptlab.analysis.intervals import (
    completion_interval,
    ctr_interval,
    score_interval,
    session_interval,
)
from promptlab.views.compare import (
    COMPARISON_COLUMNS,
    cache_note,
    comparison_cells,
    fmt_ms,
    fmt_pct,
    srm_verdict,
)

if TYPE_CHECKING:
    from promptlab.analysis.compare import Comparison
    from promptlab.analysis.stats import MetricComparison
    from promptlab.records import LogMetricsRow, MetricsRow, ScoreCounts
    from promptlab.records.sessions import SessionMetrics


def aligned(rows: list[tuple[str, ...]], left: set[int]) -> list[str]:
    """Rows as text columns: the columns in `left` left-aligned (names), the rest right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def metrics_table(rows: list[MetricsRow]) -> list[str]:
    header = (
        "variant" if rows[0].variant is not None else "version",
        "model",
        "items",
        "ok",
        "failed",
        "complete",
        "95% interval",
        "mean ms",
        "p50 ms",
        "p90 ms",
        "p95 ms",
        "p99 ms",
        "tokens",
        "cost $",
    )
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        ci = completion_interval(r)
        table.append(
            (
                r.label,
                r.model,
                str(r.finished),
                str(r.succeeded),
                str(r.failed),
                fmt_pct(r.completion_rate),
                f"{ci.low:.1%}-{ci.high:.1%}" if r.finished else "-",
                fmt_ms(r.latency_mean_ms),
                fmt_ms(r.latency_p50_ms),
                fmt_ms(r.latency_p90_ms),
                fmt_ms(r.latency_p95_ms),
                fmt_ms(r.latency_p99_ms),
                str(r.input_tokens + r.output_tokens),
                f"{r.cost_usd:.4f}",
            )
        )
    note = cache_note(rows)
    return aligned(table, {0, 1}) + ([note] if note else [])


def feedback_table(rows: list[MetricsRow]) -> list[str]:
    """Impressions, clicks, CTR with its Wilson interval, thumbs up and down."""
    header = (
        "variant" if rows[0].variant is not None else "version",
        "model",
        "impressions",
        "clicks",
        "CTR",
        "95% interval",
        "thumbs up",
        "thumbs down",
    )
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        ci = ctr_interval(r)
        table.append(
            (
                r.label,
                r.model,
                str(r.impressions),
                str(r.clicks),
                fmt_pct(r.ctr),
                f"{ci.low:.1%}-{ci.high:.1%}" if r.impressions else "-",
                str(r.thumbs_up),
                str(r.thumbs_down),
            )
        )
    return aligned(table, {0, 1})


def logs_table(rows: list[LogMetricsRow]) -> list[str]:
    """Per version in the production logs: requests, completion, CTR, latency percentiles."""
    header = (
        "version",
        "requests",
        "complete",
        "95% interval",
        "CTR",
        "95% interval",
        "mean ms",
        "p50 ms",
        "p90 ms",
        "p95 ms",
        "p99 ms",
    )
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        done, ctr = completion_interval(r), ctr_interval(r)
        table.append(
            (
                r.label,
                str(r.requests),
                fmt_pct(r.completion_rate),
                f"{done.low:.1%}-{done.high:.1%}" if r.completion_known else "-",
                fmt_pct(r.ctr),
                f"{ctr.low:.1%}-{ctr.high:.1%}" if r.click_known else "-",
                fmt_ms(r.latency_mean_ms),
                fmt_ms(r.latency_p50_ms),
                fmt_ms(r.latency_p90_ms),
                fmt_ms(r.latency_p95_ms),
                fmt_ms(r.latency_p99_ms),
            )
        )
    lines = aligned(table, {0})
    scored = [(r.label, score) for r in rows for score in r.scores]
    if scored:
        lines.append("scores sent as feedback events (mean per event):")
        head = ("version", "score", "mean", "events", "units")
        score_rows = [
            (label, s.name, f"{s.mean:.3f}", str(s.scores), str(s.units)) for label, s in scored
        ]
        lines += aligned([head, *score_rows], {0, 1})
    return lines


def checks_table(rows: list[MetricsRow]) -> list[str]:
    """Validity, repair, invalid, truncation and rule-failure rates of rows with checks."""
    header = (
        "variant" if rows[0].variant is not None else "version",
        "model",
        "checked",
        "valid",
        "repaired",
        "invalid",
        "truncated",
        "rule failed",
    )
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        if r.checked:
            table.append(
                (
                    r.label,
                    r.model,
                    str(r.checked),
                    fmt_pct(r.validity_rate),
                    fmt_pct(r.repair_rate),
                    fmt_pct(r.invalid_rate),
                    fmt_pct(r.truncation_rate),
                    fmt_pct(r.rule_failure_rate),
                )
            )
    return aligned(table, {0, 1})


def comparison_table(rows: list[MetricComparison]) -> list[str]:
    table: list[tuple[str, ...]] = [COMPARISON_COLUMNS]
    table += [comparison_cells(r) for r in rows]
    return aligned(table, {0, 1, 10, 11, 14})


def srm_line(comparison: Comparison) -> str:
    srm = comparison.srm
    assert srm is not None
    if srm.mismatch:
        return f"!! SAMPLE RATIO MISMATCH: {srm_verdict(srm).split(': ', 1)[1]}"
    return f"SRM check: {srm_verdict(srm)}"


def scores_table(scores: list[ScoreCounts]) -> list[str]:
    """One line per variant (or version) and scorer."""
    lines = []
    for s in scores:
        interval = score_interval(s)
        shown = "-" if s.mean is None else f"{s.mean:6.1%}"
        ci = f"[{interval.low:.1%}, {interval.high:.1%}]" if interval else ""
        lines.append(
            f"  {s.label:<24} {s.scorer:<14} {shown} {ci:<17} scored {s.scored}  "
            f"no output {s.no_output}  malformed {s.malformed}  no expected {s.no_expected}"
            + (f"  not judged {s.not_judged}" if s.not_judged else "")
        )
    return lines


def sessions_table(sessions: list[SessionMetrics]) -> list[str]:
    """A replayed conversation log per session: none for any other run."""
    if not sessions:
        return []
    lines = [
        "per session (a session completes when every turn does; latency: its turns'"
        " summed; scores: mean of session means):"
    ]
    for s in sessions:
        interval = session_interval(s)
        ci = f"[{interval.low:.1%}, {interval.high:.1%}]" if interval else ""
        p50 = "-" if s.latency_p50_ms is None else f"{s.latency_p50_ms:.0f}"
        p90 = "-" if s.latency_p90_ms is None else f"{s.latency_p90_ms:.0f}"
        scored = "".join(f"  {name} {mean:.1%}" for name, mean in s.scores.items())
        lines.append(
            f"  {s.variant:<24} sessions {s.sessions}  completed {s.completed} "
            f"({s.completion:.1%} {ci})  turns {s.turns_per_session:.1f}  "
            f"latency p50 {p50} p90 {p90} ms{scored}"
        )
    return lines
