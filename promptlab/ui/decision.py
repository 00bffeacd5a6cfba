"""Compare's "Decide now" for two versions in production logs.

Logs keep arriving, so Compare reads them live (always valid). Once every arm has the
planned units, a person may take the final look (promptlab/facades/decisions.py): it is
taken once, after a confirmation that says so, and from then on the page shows the
stored decision with who took it and when, instead of the live view.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from promptlab.analysis.compare import Comparison
from promptlab.analysis.sequential import DEFAULT_PLANNED_UNITS
from promptlab.errors import PromptlabError
from promptlab.ui.confirm import ask, confirmed
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench


def decided_or_live(
    wb: Workbench, refs: tuple[str, str], live: Comparison, planned_units: int | None, since: Any
) -> Comparison:
    """The stored decision's final look when one was taken (said in one line), else
    the live comparison with the way to decide beside it."""
    ref_a, ref_b = refs
    decided = wb.analysis.decisions.get(ref_a, ref_b)
    if decided is not None:
        st.info(escape_markdown(decided.line), icon=":material/gavel:")
        return decided.comparison
    planned = planned_units or DEFAULT_PLANNED_UNITS
    units = [u for u, _ in live.arms.values()]
    fewest = min(units) if len(units) == 2 else 0
    pending_key = f"decide::{ref_a}::{ref_b}"
    if fewest < planned:
        st.caption(
            f"Decide now opens once each arm has the planned {planned:,} units "
            f"({fewest:,} in the smaller arm so far): the final look is taken once."
        )
        return live
    if st.button("Decide now", key=f"{pending_key}::ask", icon=":material/gavel:"):
        ask(pending_key)
    question = (
        f"Take the final look at {ref_b} against {ref_a} now? It is a fixed-horizon test "
        "at the 4% left after the live looks, taken once: it is stored with its figures, "
        "your name and the time, and Compare shows it from then on."
    )
    if confirmed(pending_key, question, "Yes, decide now", "Not yet"):
        try:
            wb.analysis.decisions.decide(ref_a, ref_b, planned_units=planned, since=since)
        except PromptlabError as exc:
            show_error(exc)
            return live
        st.rerun()  # the stored decision's line says what was decided
    return live
