"""Runs: start a run from a YAML spec, watch live progress, cancel and resume."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import streamlit as st

from promptlab.config import PROJECT_ROOT
from promptlab.engine import Engine, RunProgress, parse_spec_text
from promptlab.errors import PromptlabError
from promptlab.ui.resources import get_engine, get_settings
from promptlab.ui.shell import require_shell

#: How often the live panels poll the engine.
POLL_EVERY = timedelta(seconds=1)
#: Failed items listed under a run (the counts above cover them all).
FAILURES_SHOWN = 10
EXAMPLE_SPEC = """\
name: triage-production-vs-staging
dataset: data/demo/tickets.csv   # CSV or JSONL; relative to the project folder
variants:                        # every row goes through every variant
  - name: production
    prompt: ticket-triage@production
  - name: staging
    prompt: ticket-triage@staging
limits:
  sim: {rpm: 600, concurrency: 8}
"""


def start_form(engine: Engine) -> None:
    data_dir = get_settings().data_dir
    with st.expander("Start a run from a YAML spec", icon=":material/play_arrow:"):
        text = st.text_area(
            "Run spec (YAML)",
            EXAMPLE_SPEC,
            height=220,
            key="spec_text",
            help=f"Datasets are read from {data_dir} only; endpoints a spec adds have no "
            "key and must be on this machine (see the README's Security section).",
        )
        if st.button("Start run", type="primary", key="start_run"):
            try:
                spec = parse_spec_text(text, base_dir=PROJECT_ROOT, dataset_root=data_dir)
                run_id = engine.submit(spec)
            except PromptlabError as exc:
                st.error(str(exc), icon=":material/error:")
            else:
                st.session_state["selected_run"] = run_id
                st.success(f"Started {run_id}", icon=":material/check_circle:")


@st.fragment(run_every=POLL_EVERY)
def runs_table(engine: Engine) -> None:
    runs = engine.list_runs()
    if not runs:
        st.info("No runs yet.", icon=":material/info:")
        return
    st.dataframe(
        pd.DataFrame(
            {
                "run": p.run_id,
                "name": p.name,
                "status": p.status,
                "progress": p.fraction,
                "done": f"{p.done}/{p.total}",
                "failed": p.failed,
                "submitted": p.submitted_at,
            }
            for p in runs
        ),
        column_config={"progress": st.column_config.ProgressColumn(min_value=0, max_value=1)},
        hide_index=True,
        width="stretch",
    )


@st.fragment(run_every=POLL_EVERY)
def run_detail(engine: Engine, run_id: str) -> None:
    p = engine.status(run_id)
    st.subheader(f"{p.name} · {p.status}")
    if p.reason:
        st.caption(p.reason)
    st.progress(p.fraction, text=f"{p.done} of {p.total} items")
    cols = st.columns(6)
    cols[0].metric("Queued", p.pending)
    cols[1].metric("In flight", p.in_flight)
    cols[2].metric("Succeeded", p.succeeded)
    cols[3].metric("Failed", p.failed)
    cols[4].metric("Throughput", _rate(p))
    cols[5].metric("ETA", f"{p.eta_s:.0f} s" if p.eta_s is not None else "–")
    if p.limiters:
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
                for s in p.limiters
            ),
            hide_index=True,
            width="stretch",
        )
    outcome(engine, p.run_id)
    actions(engine, p)


def outcome(engine: Engine, run_id: str) -> None:
    """What the stored results add up to so far: attempts, tokens, cost, latency, failures."""
    summary = engine.reads.summary(run_id)
    cols = st.columns(6)
    cols[0].metric("Attempts", summary.attempts, help="every request sent, retries included")
    cols[1].metric("429s", summary.rate_limited_attempts)
    tokens_in, tokens_out = summary.input_tokens, summary.output_tokens
    cols[2].metric("Tokens", tokens_in + tokens_out, help=f"{tokens_in} in, {tokens_out} out")
    cols[3].metric("Cost", f"${summary.cost_usd:.4f}", help="from the providers file's prices")
    for col, label, value in (
        (cols[4], "Latency p50", summary.latency_p50_ms),
        (cols[5], "Latency p95", summary.latency_p95_ms),
    ):
        col.metric(label, f"{value:.0f} ms" if value is not None else "–")
    failures = engine.reads.failure_examples(run_id, FAILURES_SHOWN)
    if failures:
        st.markdown("**First failed items**")
        st.dataframe(
            pd.DataFrame(
                {
                    "dataset row": f.row_index + 1,
                    "variant": f.variant,
                    "kind": f.error_kind,
                    "message": f.message,
                }
                for f in failures
            ),
            hide_index=True,
            width="stretch",
        )


def actions(engine: Engine, p: RunProgress) -> None:
    left, right, _ = st.columns([1, 1, 4])
    if left.button("Cancel", disabled=not p.can_cancel, key=f"cancel_{p.run_id}"):
        engine.cancel(p.run_id)
        st.rerun()
    if right.button("Resume", disabled=not p.can_resume, key=f"resume_{p.run_id}"):
        try:
            engine.resume(p.run_id)
        except PromptlabError as exc:
            st.error(str(exc), icon=":material/error:")
        else:
            st.rerun()


def _rate(p: RunProgress) -> str:
    return f"{p.throughput_per_s:.1f}/s" if p.throughput_per_s is not None else "–"


require_shell("pages/runs.py")
st.title("Runs")
engine = get_engine()
start_form(engine)
runs_table(engine)
run_ids = [p.run_id for p in engine.list_runs()]
if run_ids:
    selected = st.selectbox(
        "Run",
        run_ids,
        index=run_ids.index(st.session_state["selected_run"])
        if st.session_state.get("selected_run") in run_ids
        else 0,
        key="run_choice",
    )
    run_detail(engine, selected)
