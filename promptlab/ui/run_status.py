"""A run's state as the Runs page heads its detail: a process gone before the end, why
it stopped, anomalies and failed after-run work, items closed and the live figures."""

from __future__ import annotations

import streamlit as st

from promptlab.facades.runs import RunView
from promptlab.ui.widgets import escape_markdown


def run_status(view: RunView) -> None:
    """Warnings first, then the items closed and the counts, throughput and ETA."""
    if view.run.process_gone:
        st.warning(
            "The process that ran this run is gone (stopped or killed) before it finished. "
            f"Its stored results are kept; go on with **Resume** below or "
            f"`{view.run.resume_command}`.",
            icon=":material/warning:",
        )
    if view.reason:
        st.text(view.reason)
    alerts(view)
    after_run(view)
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


def alerts(view: RunView) -> None:
    """Anomalies seen in the results (a burst of failures, a field gone empty, ...)."""
    for alert in view.alerts:
        # The message names the variant and the output field (a spec's and a schema's).
        st.warning(escape_markdown(f"{alert.kind}: {alert.message}"), icon=":material/warning:")


def after_run(view: RunView) -> None:
    """After-run work that failed (scores, a judge, a cross-check), each with its why."""
    for line in view.after_run_failures:
        st.error(escape_markdown(f"After-run work failed: {line}"), icon=":material/error:")


def _rate(view: RunView) -> str:
    return f"{view.throughput_per_s:.1f}/s" if view.throughput_per_s is not None else "–"
