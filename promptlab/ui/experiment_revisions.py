"""The Experiments page's revisions table: per revision, the prompt version each variant
was pinned to and its share of the traffic, the ramp, the kill switch and the note."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd
import streamlit as st

from promptlab.errors import PromptlabError
from promptlab.experiments import ExperimentConfig
from promptlab.workbench import Workbench


def revisions_table(wb: Workbench, name: str) -> None:
    revisions = wb.experiments.history(name)
    semvers = version_semvers(wb, revisions)
    st.dataframe(
        pd.DataFrame(
            {
                "revision": c.revision,
                "versions": variant_versions(c, semvers),
                "ramp %": c.ramp,
                "killed": c.killed,
                "note": c.note,
                "by": c.author,
                "at": c.created_at,
            }
            for c in revisions
        ),
        column_config={
            "versions": st.column_config.TextColumn(
                help="Each variant: the prompt version it was pinned to (model when "
                "overridden) and its share of the units in the experiment",
                width="large",
            )
        },
        hide_index=True,
        width="stretch",
    )


def version_semvers(wb: Workbench, revisions: Iterable[ExperimentConfig]) -> dict[str, str]:
    """The semver of every version of every prompt the revisions' variants use, by id
    (one read per prompt, not per variant)."""
    prompts = {v.prompt.partition("@")[0] for c in revisions for v in c.variants}
    semvers: dict[str, str] = {}
    for prompt in sorted(prompts):
        try:
            semvers.update((v.id, v.semver) for v in wb.prompts.versions(prompt))
        except PromptlabError:  # a prompt gone since: its variants show the reference
            continue
    return semvers


def variant_versions(config: ExperimentConfig, semvers: Mapping[str, str]) -> str:
    """`control: ticket-triage@1.0.0 (70%), staging: ticket-triage@1.1.0 (30%)`: what
    each variant of the revision sends and the share of weights it has."""
    total = sum(v.weight for v in config.variants) or 1.0
    parts = []
    for v in config.variants:
        semver = semvers.get(v.prompt_version_id or "")
        ref = f"{v.prompt.partition('@')[0]}@{semver}" if semver else v.prompt
        model = f" on {v.model}" if v.model else ""
        parts.append(f"{v.name}: {ref}{model} ({100 * v.weight / total:.3g}%)")
    return ", ".join(parts)


def weights_text(config: ExperimentConfig) -> str:
    """The split as people read it: `control 70, concise 30`."""
    return ", ".join(f"{v.name} {v.weight:g}" for v in config.variants)


def traffic_changes(
    config: ExperimentConfig, weights: Mapping[str, float], ramp: float
) -> list[str]:
    """What a change of weights and ramp would change, each in words (`weight concise 50
    → 30`, `ramp 10% → 25%`); empty when it changes nothing."""
    changes = [
        f"weight {v.name} {v.weight:g} → {weights[v.name]:g}"
        for v in config.variants
        if v.name in weights and weights[v.name] != v.weight
    ]
    if ramp != config.ramp:
        changes.append(f"ramp {config.ramp:g}% → {ramp:g}%")
    return changes
