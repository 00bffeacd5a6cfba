"""The Experiments page's form for a new experiment: its name, mode and unit column, and
each variant's prompt version (any saved one, labels shown), model and weight."""

from __future__ import annotations

from typing import Any

import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.ui.widgets import escape_markdown, show_error
from promptlab.workbench import Workbench

#: Variants the form offers at most (an experiment file may have more).
MAX_VARIANTS = 6


def version_labels(wb: Workbench) -> dict[str, tuple[str, ...]]:
    """Every saved prompt version (`name@1.2.0`, newest first per prompt) with its
    labels: what a variant of a new experiment may be."""
    return {
        version.ref: tuple(sorted(k for k, v in prompt.labels.items() if v == version.semver))
        for prompt in wb.prompts.list()
        for version in wb.prompts.versions(prompt.name)
    }


def labelled(versions: dict[str, tuple[str, ...]], label: str, prompt: str | None = None) -> str:
    """The first version carrying `label` (of `prompt`, when given), else ""."""
    return next(
        (
            ref
            for ref, labels in versions.items()
            if label in labels and prompt in (None, ref.partition("@")[0])
        ),
        "",
    )


def create_form(wb: Workbench) -> None:
    versions = version_labels(wb)
    with st.expander("New experiment", icon=":material/add:", expanded=not wb.experiments.list()):
        if not versions:
            st.info("Create a prompt first (Prompts page).", icon=":material/info:")
            return
        refs = list(versions)
        # Control starts on a production version, the variants on the same prompt's staging.
        control = labelled(versions, "production") or refs[0]
        challenger = labelled(versions, "staging", control.partition("@")[0]) or control
        count = st.number_input(
            "Variants", min_value=2, max_value=MAX_VARIANTS, value=2, key="new_count"
        )
        # Enter in a field (the Name first of all) must not create the experiment with
        # the defaults still showing: only the button submits.
        with st.form("new_experiment", enter_to_submit=False):
            name = st.text_input("Name", key="new_name", placeholder="triage-tone")
            left, right = st.columns(2)
            mode = left.selectbox(
                "Mode",
                ["split", "all"],
                key="new_mode",
                help="split: each unit (user, session) gets one variant, sticky; "
                "all: every row through every variant, for a paired comparison",
            )
            unit_column = right.text_input(
                "Unit column",
                key="new_unit",
                help="The dataset column holding the user or session id (for split runs)",
            )
            variants = [
                variant_inputs(i, versions, control if i == 0 else challenger)
                for i in range(int(count))
            ]
            submitted = st.form_submit_button("Create experiment", type="primary")
        if submitted:
            data: dict[str, Any] = {"name": name, "mode": mode, "variants": variants}
            if unit_column:
                data["unit_column"] = unit_column
            create(wb, data)


def variant_inputs(i: int, versions: dict[str, tuple[str, ...]], default: str) -> dict[str, Any]:
    """The inputs of the form's variant `i` (the first is control), as the variant's data."""
    refs = list(versions)
    st.markdown(f"**Variant {i + 1}**" + (" (control)" if i == 0 else ""))
    cols = st.columns([2, 4, 2, 1])
    v_name = cols[0].text_input(
        "Name", value="control" if i == 0 else f"variant-{i}", key=f"new_v{i}_name"
    )
    version = cols[1].selectbox(
        "Prompt version",
        refs,
        index=refs.index(default),
        format_func=lambda ref: f"{ref} ({', '.join(versions[ref])})" if versions[ref] else ref,
        key=f"new_v{i}_prompt",
        help="Every saved version, with its labels in brackets; the experiment "
        "keeps the version picked here even when a label moves on",
    )
    model = cols[2].text_input(
        "Model (optional)",
        key=f"new_v{i}_model",
        help="endpoint:model, e.g. sim:fast; empty: the version's own model",
    )
    weight = cols[3].number_input("Weight", min_value=0.0, value=50.0, key=f"new_v{i}_weight")
    variant: dict[str, Any] = {"name": v_name, "prompt": version, "weight": weight}
    if i == 0:
        variant["control"] = True
    if model:
        variant["model"] = model
    return variant


def create(wb: Workbench, data: dict[str, Any]) -> None:
    """Add the experiment the form describes; it becomes the one chosen below. A name
    that exists is refused: creating never makes a new revision of another experiment
    (`based_on=0` refuses one made meanwhile too)."""
    name = str(data.get("name") or "").strip()
    if name and name in {c.name for c in wb.experiments.list()}:
        st.error(
            f"An experiment named {escape_markdown(name)} exists: choose it below to change "
            "its split (saved as a new revision), or give this one another name",
            icon=":material/error:",
        )
        return
    try:
        config, created = wb.experiments.add(data, based_on=0)
    except PromptlabError as exc:
        show_error(exc)
    else:
        st.session_state["experiment_choice"] = config.name
        shown = escape_markdown(config.name)
        if created:
            st.success(f"Created {shown}", icon=":material/check_circle:")
        else:
            st.info(f"{shown} already has this content", icon=":material/info:")
