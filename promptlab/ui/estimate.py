"""A run's estimate as launch forms show it: figures, the split per variant, warnings."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from promptlab.analysis.stats import MIN_UNITS_PER_ARM
from promptlab.engine.plan.estimate import RunEstimate
from promptlab.ui.widgets import escape_markdown


def show_estimate(estimate: RunEstimate) -> None:
    """Requests, units, tokens, cost and time; per variant its units and requests; and
    what to know before starting (too few units, a lumpy split) as warnings."""
    units = estimate.units
    cols = st.columns(5 if units is not None else 4)
    cols[0].metric("Requests", f"{estimate.requests:,}")
    if units is not None:
        cols[-4].metric(
            "Units",
            f"{units.units:,}" if units.complete else f"{units.units:,}+",
            help=escape_markdown(
                f"distinct values of {units.column}; each gets one variant by its hash, "
                f"and a variant needs at least {MIN_UNITS_PER_ARM} to be compared"
                + ("" if units.complete else " (counted in the first rows only)")
            ),
        )
    cols[-3].metric(
        "Tokens",
        f"{estimate.input_tokens + estimate.output_tokens:,}",
        help=f"{estimate.input_tokens:,} in, {estimate.output_tokens:,} out",
    )
    cols[-2].metric(
        "Cost",
        f"${estimate.cost_usd:.4f}" if estimate.cost_usd is not None else "no price",
        help="from the providers file's price table",
    )
    # The bound is named by the providers file: escaped.
    cols[-1].metric(
        "Time", duration(estimate.seconds), help=escape_markdown(f"bounded by {estimate.bound}")
    )
    st.dataframe(
        pd.DataFrame(
            {
                "variant": v.name,
                **(
                    {"weight share": f"{100 * (v.expected_share or 0):.0f}%", "units": v.units}
                    if units is not None
                    else {}
                ),
                "requests": v.requests,
                "tokens": v.input_tokens + v.output_tokens,
                "cost $": v.cost_usd,
                "output from": v.basis,
            }
            for v in estimate.variants
        ),
        hide_index=True,
        width="stretch",
    )
    for warning in estimate.warnings:
        st.warning(escape_markdown(warning), icon=":material/warning:")


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
