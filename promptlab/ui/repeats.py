"""The Compare page's "Repeats" section: what a run's repeats of each row say."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from promptlab.views.repeats import SPREAD_METRICS, repeat_rows, spread_figure
from promptlab.workbench import Workbench


def repeats_section(wb: Workbench, run_id: str) -> None:
    """Per variant: perplexity, token consistency (exact and by field) and the spread
    between repeats, with each row's mean and ± sd band. Drawn only when the run
    repeats its rows (`repeats:` above 1)."""
    report = wb.analysis.repeats(run_id)
    if report.repeats < 2 or not report.variants:
        return
    st.subheader("Repeats: spread, token consistency, perplexity")
    st.caption(
        f"Each row was sent {report.repeats} times per variant. Token consistency: the "
        "mean over rows of the share of repeat pairs with identical output (by field: "
        "equal values of a JSON field). Perplexity: exp(-mean log-probability) of the "
        "output tokens; empty when the endpoint gave no log-probabilities. Spread: the "
        "standard deviation across a row's repeats, averaged over rows."
    )
    st.dataframe(pd.DataFrame(repeat_rows(report)), hide_index=True, width="stretch")
    metric = st.radio(
        "Spread of", list(SPREAD_METRICS), horizontal=True, key=f"repeats-metric-{run_id}"
    )
    st.plotly_chart(spread_figure(report, metric), width="stretch", key=f"repeats-figure-{run_id}")
