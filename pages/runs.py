"""Runs: start a run from a YAML spec, watch it live, compare its variants, cancel, resume."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import streamlit as st

from promptlab.ui.resources import get_workbench
from promptlab.ui.shell import require_shell
from promptlab.ui.widgets import show_error
from promptlab.workbench import PromptlabError, RunView, RunWithCounts, Workbench

#: How often the live panel polls; each poll reads one snapshot of the store.
POLL_EVERY = timedelta(seconds=1)
EXAMPLE_SPEC = """\
name: triage-production-vs-staging
dataset: data/demo/tickets.csv   # CSV or JSONL; relative to the project folder
variants:                        # every row goes through every variant
  - name: production
    prompt: ticket-triage@production
  - name: staging
    prompt: ticket-triage@staging
limits:
  sim: {rpm: 600, concurrency: 8}   # caps this run only
"""


def start_form(wb: Workbench) -> None:
    with st.expander("Start a run from a YAML spec", icon=":material/play_arrow:"):
        text = st.text_area(
            "Run spec (YAML)",
            EXAMPLE_SPEC,
            height=220,
            key="spec_text",
            help=f"Datasets are read from {wb.settings.data_dir} only; endpoints a spec adds "
            "have no key and must be on this machine (see the README's Security section).",
        )
        if st.button("Start run", type="primary", key="start_run"):
            try:
                run_id = wb.start_run(wb.parse_pasted_spec(text))
            except PromptlabError as exc:
                show_error(exc)
            else:
                st.session_state["run_choice"] = run_id  # follow the new run
                st.success(f"Started {run_id}", icon=":material/check_circle:")


def runs_table(runs: list[RunWithCounts]) -> None:
    st.dataframe(
        pd.DataFrame(
            {
                "run": r.run.run_id,
                "name": r.run.name,
                "status": r.run.status,
                "closed": r.items.finished / r.run.total_items if r.run.total_items else 0.0,
                "succeeded": r.items.succeeded,
                "failed": r.items.failed,
                "cancelled": r.items.cancelled,
                "items": r.run.total_items,
                "submitted": r.run.submitted_at,
            }
            for r in runs
        ),
        column_config={
            "closed": st.column_config.ProgressColumn(
                min_value=0, max_value=1, help="items with their final row"
            )
        },
        hide_index=True,
        width="stretch",
    )


@st.fragment(run_every=POLL_EVERY)
def live(wb: Workbench) -> None:
    """The runs list and the chosen run, refreshed together so their figures agree."""
    listed = wb.list_runs()
    if not listed:
        st.info("No runs yet.", icon=":material/info:")
        return
    runs_table(listed)
    labels = {
        r.run.run_id: f"{r.run.name} · {r.run.submitted_at:%Y-%m-%d %H:%M:%S} · {r.run.run_id}"
        for r in listed
    }
    if st.session_state.get("run_choice") not in labels:
        st.session_state.pop("run_choice", None)
    selected = st.selectbox("Run", list(labels), format_func=labels.__getitem__, key="run_choice")
    run_detail(wb, selected)


def run_detail(wb: Workbench, run_id: str) -> None:
    view = wb.run_view(run_id)
    st.subheader(f"{view.run.name} · {view.status}")
    if view.reason:
        st.text(view.reason)
    c = view.counts
    st.progress(
        view.fraction_closed,
        text=f"{c.finished} of {view.total} items closed: {c.succeeded} succeeded, "
        f"{c.failed} failed, {c.cancelled} cancelled",
    )
    cols = st.columns(7)
    cols[0].metric("Queued", c.pending)
    cols[1].metric("In flight", c.in_flight)
    cols[2].metric("Succeeded", c.succeeded)
    cols[3].metric("Failed", c.failed)
    cols[4].metric("Cancelled", c.cancelled)
    cols[5].metric("Throughput", _rate(view))
    cols[6].metric("ETA", f"{view.eta_s:.0f} s" if view.eta_s is not None else "–")
    if view.limiters:
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
    outcome(view)
    variants(view)
    failures(view)
    actions(wb, view)


def outcome(view: RunView) -> None:
    """What the stored results add up to: attempts, tokens, cost, latency."""
    s = view.summary
    cols = st.columns(6)
    cols[0].metric("Attempts", s.attempts, help="every request sent, retries included")
    cols[1].metric("429s", s.rate_limited_attempts)
    tokens = s.input_tokens + s.output_tokens
    cols[2].metric("Tokens", tokens, help=f"{s.input_tokens} in, {s.output_tokens} out")
    cols[3].metric("Cost", f"${s.cost_usd:.4f}", help="from the providers file's prices")
    cols[4].metric("Latency p50", _ms(s.latency_p50_ms))
    cols[5].metric("Latency p95", _ms(s.latency_p95_ms))


def variants(view: RunView) -> None:
    """The variants side by side: an A/B run told apart."""
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
                "p50 ms": v.latency_p50_ms,
                "p90 ms": v.latency_p90_ms,
                "p99 ms": v.latency_p99_ms,
                "tokens": v.input_tokens + v.output_tokens,
                "cost $": v.cost_usd,
            }
            for v in view.variants
        ),
        column_config={
            "completion": st.column_config.NumberColumn(
                format="percent", help="succeeded / finished items"
            ),
            "p50 ms": st.column_config.NumberColumn(format="%.0f"),
            "p90 ms": st.column_config.NumberColumn(format="%.0f"),
            "p99 ms": st.column_config.NumberColumn(format="%.0f"),
            "cost $": st.column_config.NumberColumn(format="%.4f"),
        },
        hide_index=True,
        width="stretch",
        key=f"variants_{view.run_id}",
    )


def failures(view: RunView) -> None:
    if not view.failures:
        return
    kinds = ", ".join(f"{kind} {count}" for kind, count in view.failure_kinds.items())
    st.markdown(f"**First failed items** ({kinds})")
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


def actions(wb: Workbench, view: RunView) -> None:
    left, right, _ = st.columns([1, 1, 4])
    if left.button("Cancel", disabled=not view.can_cancel, key=f"cancel_{view.run_id}"):
        wb.cancel_run(view.run_id)
        st.rerun()
    if right.button("Resume", disabled=not view.can_resume, key=f"resume_{view.run_id}"):
        try:
            wb.resume_run(view.run_id)
        except PromptlabError as exc:
            show_error(exc)
        else:
            st.rerun()


def _rate(view: RunView) -> str:
    return f"{view.throughput_per_s:.1f}/s" if view.throughput_per_s is not None else "–"


def _ms(value: float | None) -> str:
    return f"{value:.0f} ms" if value is not None else "–"


require_shell("pages/runs.py")
st.title("Runs")
workbench = get_workbench()
start_form(workbench)
live(workbench)
