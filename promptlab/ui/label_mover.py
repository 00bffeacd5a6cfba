"""The Prompts page's Labels tab: where each label points, and the form that moves one.

The form starts on no version, so a click without a choice moves nothing; moving
`production` (what live services ask for) waits for a second, explicit confirmation.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.facades.prompts import NO_VERSION
from promptlab.records import PromptVersion
from promptlab.ui.flash import flash, show_flash
from promptlab.ui.seen import seen_before
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench

#: The label a move of asks first: live services resolve `name@production`.
CONFIRMED_LABEL = "production"


@dataclass(frozen=True)
class LabelMove:
    """A move asked for: the label, the version chosen, and where the mover saw it point
    (a version id, or NO_VERSION) with that version's semver for the question (or None)."""

    label: str
    target: str
    expected: str
    shown_at: str | None


def labels_tab(wb: Workbench, name: str, versions: list[PromptVersion]) -> None:
    current = wb.prompts.labels(name, versions)
    if current:
        st.dataframe(
            pd.DataFrame(
                {"label": k, "version": v.semver, "id": v.short_id} for k, v in current.items()
            ),
            hide_index=True,
        )
    else:
        st.caption("No labels yet.")
    # Where each label pointed as shown before the click: a move names it, so one made
    # while someone else moved the label is refused instead of undoing theirs.
    shown = seen_before(f"labels::{name}", {k: v.id for k, v in current.items()})
    pending_key = f"label_move::{name}"
    # Enter in the Label field must not move anything: only the button submits.
    with st.form(f"label_form::{name}", enter_to_submit=False):
        l1, l2 = st.columns(2)
        label = l1.text_input("Label", value="production", help="production, staging, any name")
        target = l2.selectbox(
            "Point it at",
            [v.semver for v in versions],
            index=None,
            placeholder="Choose a version",
        )
        moved = st.form_submit_button("Move label")
    show_flash("labels")
    if moved:
        st.session_state.pop(pending_key, None)
        if target is None:
            st.warning("Choose a version in “Point it at”: nothing moved.", icon=":material/info:")
            return
        move = asked_move(label.strip(), target, shown, versions)
        if move.label != CONFIRMED_LABEL or move.shown_at == target:
            apply_move(wb, name, move)
            return
        st.session_state[pending_key] = move
    pending: LabelMove | None = st.session_state.get(pending_key)
    if pending is not None:
        confirm_move(wb, name, pending, pending_key)


def asked_move(
    label: str, target: str, shown: dict[str, str], versions: list[PromptVersion]
) -> LabelMove:
    """The move the form asks for, with where the label was shown pointing."""
    expected = shown.get(label, NO_VERSION)
    shown_at = next((v.semver for v in versions if v.id == expected), None)
    return LabelMove(label, target, expected, shown_at)


def confirm_move(wb: Workbench, name: str, move: LabelMove, pending_key: str) -> None:
    """Ask before moving production; the answer clears the question either way."""
    where = f"from {move.shown_at}" if move.shown_at else "(it points nowhere yet)"
    st.warning(
        escape_markdown(
            f"Move {name}@{move.label} {where} to {move.target}? Anything that resolves "
            f"{name}@{move.label} from now on gets {move.target}."
        ),
        icon=":material/warning:",
    )
    yes, no, _ = st.columns([2, 2, 3])
    if yes.button(
        f"Yes, move {move.label} to {move.target}", type="primary", key=f"{pending_key}::yes"
    ):
        st.session_state.pop(pending_key, None)
        apply_move(wb, name, move)
    if no.button(f"Keep {move.label} where it is", key=f"{pending_key}::no"):
        st.session_state.pop(pending_key, None)
        st.rerun()


def apply_move(wb: Workbench, name: str, move: LabelMove) -> None:
    try:
        version = wb.prompts.set_label(name, move.target, move.label, expected=move.expected)
    except PromptlabError as exc:
        show_error(exc)
        return
    flash("labels", "success", f"{name}@{move.label} now points at {version.semver}")
    st.rerun()
