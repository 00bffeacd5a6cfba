"""Semantic drift where a run is read: its rate per variant (Compare) and an item's own
distance (the item view), from the run's last `promptlab drift` check."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from promptlab.ui.widgets import escape_markdown

if TYPE_CHECKING:
    from promptlab.views.item import ItemView
    from promptlab.workbench import Workbench

#: Said under the drift table: what the rate is and how to measure it again.
DRIFT_HELP = (
    "Filled prompts far from their version's typical prompt (its `examples:` values), by "
    "embedding distance past `past` (the check's threshold, or the version's own "
    "`drift_threshold:`); rates over rows with 95% intervals. `promptlab drift RUN_ID` "
    "checks again."
)


def drift_section(wb: Workbench, run_id: str) -> None:
    """Each variant's drift rate, when the run has been checked (nothing otherwise)."""
    found = wb.drift.found(run_id)
    if not any(v.renderings for v in found):
        return
    st.markdown("**Semantic drift**")
    st.dataframe(
        pd.DataFrame(
            {
                "variant": v.variant,
                "prompts": v.renderings,
                "drifted": v.drifted,
                "rate": f"{v.rate:.1%}",
                "past": v.threshold,
                "95% interval": f"{v.interval.low:.1%} to {v.interval.high:.1%}",
            }
            for v in found
        ),
        hide_index=True,
        width="stretch",
    )
    st.caption(DRIFT_HELP)


def item_drift(wb: Workbench, item: ItemView) -> None:
    """The item's prompt's distance from its version's typical prompt, when checked."""
    drift = wb.drift.rendering(item.run_id, item.variant.index, item.detail.row_index)
    if drift is None:
        return
    said = "past the threshold" if drift.drifted else "within the threshold"
    icon = ":material/warning:" if drift.drifted else ":material/check:"
    st.markdown(
        f"{icon} Semantic drift: {drift.distance:.2f} from the version's typical prompt, "
        f"{said} {drift.threshold:g} · by {escape_markdown(drift.embedder)}"
    )
