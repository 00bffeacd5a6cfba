"""A run's results as the Runs page shows them: outcome figures, limiters, per variant,
per session, context shards, scores, the fields that fail most and the first failures."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from promptlab.analysis.intervals import score_interval, session_interval
from promptlab.facades.runs import RunView
from promptlab.ui.downloads import download_buttons
from promptlab.ui.widgets import escape_markdown
from promptlab.views.batches import WORKING, span
from promptlab.workbench import Workbench

if TYPE_CHECKING:
    from promptlab.analysis.stats import Interval


def ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else "–"


def interval_text(interval: Interval | None) -> str | None:
    """`low - high` as percentages, None without an interval."""
    return f"{interval.low:.1%} - {interval.high:.1%}" if interval else None


def limiters(view: RunView) -> None:
    """Each endpoint's limiter as the run sees it now (nothing when none is live)."""
    if not view.limiters:
        return
    st.dataframe(
        pd.DataFrame(
            {
                "endpoint": s.name,
                "rpm now": s.rpm,
                "tpm now": s.tpm,
                "rate factor": s.rate_factor,
                "concurrency": s.concurrency,
                "in flight": s.in_flight,
                "waiting": s.waiting,
                "gate closed until": s.gate_closed_until,
                "429s": s.throttles,
            }
            for s in view.limiters
        ),
        hide_index=True,
        width="stretch",
    )


def batches(view: RunView) -> None:
    """A provider-batch run's batches: state, counts, how long, when each expires."""
    if not view.batches:
        return
    now = time.time()
    st.markdown(f"**Provider batches** ({len(view.batches)}): sent at the batch price")
    st.dataframe(
        pd.DataFrame(
            {
                "batch": c.batch_id or f"{c.chunk_id} (not sent yet)",
                "endpoint": c.endpoint,
                "state": c.state.replace("_", " "),
                "lines": c.lines,
                "answered": c.succeeded,
                "failed": c.failed,
                "sent": f"{_ago(now, c.submitted_at)} ago" if c.submitted_at else "",
                "expires in": _ago(c.expires_at, now) if c.state in WORKING else "",
            }
            for c in view.batches
        ),
        hide_index=True,
        width="stretch",
    )
    st.caption(
        "An expired or cancelled batch's unanswered lines, and lines that failed inside "
        "a batch, are sent again in a new batch under the run's retry policy."
    )


def _ago(later: float | None, earlier: float | None) -> str:
    """`12 min` between two epoch times ('' when either is unknown)."""
    return "" if later is None or earlier is None else span(later - earlier)


def outcome(view: RunView) -> None:
    """What the stored results add up to: attempts, tokens, cost, latency."""
    s = view.summary
    cols = st.columns(6)
    cols[0].metric("Attempts", s.attempts, help="every request sent, retries included")
    cols[1].metric("429s", s.rate_limited_attempts)
    tokens = s.input_tokens + s.output_tokens
    cols[2].metric("Tokens", tokens, help=f"{s.input_tokens} in, {s.output_tokens} out")
    cols[3].metric("Cost", f"${s.cost_usd:.4f}", help="from the providers file's prices")
    cols[4].metric("Latency p50", ms(s.latency_p50_ms))
    cols[5].metric("Latency p95", ms(s.latency_p95_ms))


def variants(wb: Workbench, view: RunView) -> None:
    """The variants side by side: an A/B run told apart, and its metrics to download."""
    st.markdown("**Per variant**")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": v.name,
                "prompt": v.prompt_ref,
                "model": f"{v.endpoint}:{v.model}",
                "succeeded": v.succeeded,
                "failed": v.failed,
                "cancelled": v.cancelled,
                "open": v.open,
                "completion": v.completion_rate,
                "valid": v.validity_rate,
                "repaired": v.repair_rate,
                "invalid": v.invalid_rate,
                "truncated": v.truncation_rate,
                "rules failed": v.rule_failure_rate,
                "p50 ms": v.latency_p50_ms,
                "p90 ms": v.latency_p90_ms,
                "p99 ms": v.latency_p99_ms,
                "tokens": v.input_tokens + v.output_tokens,
                "cost $": v.cost_usd,
            }
            for v in view.variants
        ),
        column_config=variant_columns(),
        hide_index=True,
        width="stretch",
        key=f"variants_{view.run_id}",
    )
    download_buttons(
        wb,
        "metrics",
        key=f"download_metrics_{view.run_id}",
        label="Download metrics",
        run_id=view.run_id,
        caption=f"{len(view.variants)} variants: the table above",
    )


def variant_columns() -> dict[str, Any]:
    """How the per-variant table shows its rates and figures, each rate with its meaning."""
    return {
        "completion": st.column_config.NumberColumn(
            format="percent",
            help="items that succeeded with a usable output (valid, repaired, or no "
            "output schema) / finished items",
        ),
        "valid": st.column_config.NumberColumn(
            format="percent", help="outputs that fit the output schema as written"
        ),
        "repaired": st.column_config.NumberColumn(
            format="percent", help="outputs that fit the schema once repaired"
        ),
        "invalid": st.column_config.NumberColumn(
            format="percent", help="outputs that break the schema or hold no JSON"
        ),
        "truncated": st.column_config.NumberColumn(
            format="percent", help="outputs cut off at the token limit"
        ),
        "rules failed": st.column_config.NumberColumn(
            format="percent", help="outputs that failed a rule of severity error"
        ),
        "p50 ms": st.column_config.NumberColumn(format="%.0f"),
        "p90 ms": st.column_config.NumberColumn(format="%.0f"),
        "p99 ms": st.column_config.NumberColumn(format="%.0f"),
        "cost $": st.column_config.NumberColumn(format="%.4f"),
    }


def per_session(wb: Workbench, run_id: str) -> None:
    """A replayed conversation log per session (nothing for any other run)."""
    rows = wb.analysis.sessions(run_id)
    if not rows:
        return
    st.markdown("**Per session** (a session completes when every turn does)")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": s.variant,
                "sessions": s.sessions,
                "completed": s.completion,
                "95% interval": interval_text(session_interval(s)),
                "turns per session": round(s.turns_per_session, 1),
                "session latency p50 ms": s.latency_p50_ms,
                "session latency p90 ms": s.latency_p90_ms,
                **{f"score: {name}": mean for name, mean in s.scores.items()},
            }
            for s in rows
        ),
        column_config={"completed": st.column_config.NumberColumn(format="percent")},
        hide_index=True,
        width="stretch",
        key=f"sessions_{run_id}",
    )
    context_shards(wb, run_id)


def context_shards(wb: Workbench, run_id: str) -> None:
    """The shards the replay's long sessions were cut into (when any were)."""
    shards = wb.runs.shards(run_id)
    if not shards:
        return
    summaries = [s for s in shards if s.summary is not None]
    label = f"Context shards ({len(shards)}, {len(summaries)} carrying a summary)"
    with st.expander(label):
        st.caption(
            "A session whose history outgrew the model's window, cut to fit: each "
            "turn was sent with its shard (messages counted from 1)."
        )
        st.dataframe(
            pd.DataFrame(
                {
                    "session": s.session_id,
                    "variant": s.variant,
                    "shard": s.seq_no + 1,
                    "final": s.is_final,
                    "messages": f"{s.first_message + 1}-{s.last_message + 1}",
                    "tokens": s.tokens,
                    "cut at": s.cut,
                    "summary": s.summary,
                    "summary tokens": s.summary_tokens,
                    "expires": s.expires_at,
                }
                for s in shards
            ),
            hide_index=True,
            width="stretch",
            key=f"shards_{run_id}",
        )


def scores(wb: Workbench, run_id: str) -> None:
    """Each scorer's mean per variant against the spec's expected answers (if any)."""
    counts = wb.analysis.scores(run_id)
    if not counts:
        return
    st.markdown("**Scores against expected answers**")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": c.label,
                "scorer": c.scorer,
                "score": c.mean,
                "95% interval": interval_text(score_interval(c)),
                "scored": c.scored,
                "no output": c.no_output,
                "malformed": c.malformed,
                "no expected": c.no_expected,
                "not judged": c.not_judged,
            }
            for c in counts
        ),
        column_config={
            "score": st.column_config.NumberColumn(
                format="percent",
                help="the mean score (an accuracy when each is right or wrong); failed "
                "requests and unreadable outputs score 0, rows with no expected value none",
            ),
        },
        hide_index=True,
        width="stretch",
        key=f"scores_{run_id}",
    )


def field_failures(view: RunView) -> None:
    """Which output paths fail their check most, per variant."""
    if not view.field_failures:
        return
    st.markdown("**Output fields that fail most**")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": f.variant,
                "path": f.path,
                "outputs": f.outputs,
                "most common error": f.example,
            }
            for f in view.field_failures
        ),
        hide_index=True,
        width="stretch",
        key=f"fields_{view.run_id}",
    )


def failures(view: RunView) -> None:
    if not view.failures:
        return
    kinds = ", ".join(f"{kind} {count}" for kind, count in view.failure_kinds.items())
    st.markdown(f"**First failed items** ({escape_markdown(kinds)})")
    st.dataframe(
        pd.DataFrame(
            {
                "dataset row": f.row_index + 1,
                "variant": f.variant,
                "kind": f.error_kind,
                "message": f.message,
            }
            for f in view.failures
        ),
        hide_index=True,
        width="stretch",
    )
