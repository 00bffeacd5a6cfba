"""Semantic drift (the design article's section 2.1): does a filled prompt still say what
its version says?

Filling a template with values can move what the prompt means: a product name that is
really an instruction ("ignore the above and ..."). Each of a run's renderings (a
variant and a dataset row; repeats render the same) is embedded
(promptlab/providers/embeddings.py) and compared with its version's anchor: the version
rendered with the values it declares as typical, each variable's first `examples`
entry, else its `default`. A rendering whose cosine distance from the anchor is past
the threshold is `drifted`. A version's drift rate counts renderings, and so rows, the
units a run plans: its interval is Wilson's over them (tests/test_drift.py holds its
coverage in an A/A simulation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptlab.analysis.stats import Interval, wilson_interval
from promptlab.errors import NotFoundError, PromptlabError, TemplateError
from promptlab.prompts.templates import Template
from promptlab.providers.embeddings import Embedder, cosine_distance
from promptlab.records import VariantRecord
from promptlab.store.connection import Store
from promptlab.store.drift import DriftRow, DriftStore, Rendering
from promptlab.store.runs import RunStore

#: Cosine distance past which a rendering is drifted. With the offline embedding, a short
#: prompt filled with ordinary values of another kind than its examples' (another
#: product) lies 0.15 to 0.3 from its anchor, and one whose value is a sentence of
#: instructions 0.4 to 0.55 (tests/test_drift.py): a real model's distances differ,
#: so give its own with `--threshold`.
DEFAULT_THRESHOLD = 0.4


@dataclass(frozen=True)
class VersionDrift:
    """One variant's drift in a run: its renderings, those drifted, the rate's interval."""

    variant: str
    version_id: str
    renderings: int
    drifted: int
    interval: Interval

    @property
    def rate(self) -> float:
        return self.drifted / self.renderings if self.renderings else 0.0


def anchor_values(template: Template, where: str) -> dict[str, Any]:
    """The values a version declares as typical: each variable's first `examples`
    entry, else its default; a variable with neither is refused, naming it."""
    values: dict[str, Any] = {}
    for name, schema in template.variables.get("properties", {}).items():
        examples = schema.get("examples")
        if isinstance(examples, list) and examples:
            values[name] = examples[0]
        elif "default" in schema:
            values[name] = schema["default"]
        else:
            raise TemplateError(
                f"{where}: variable {name!r} declares no `examples:` or `default:`, so the "
                "version has no typical prompt to measure drift from"
            )
    return values


def prompt_text(messages: Sequence[Mapping[str, str]]) -> str:
    """A rendered prompt as one text: its messages' roles and contents."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def check_drift(
    variants: Sequence[VariantRecord],
    renderings: Sequence[Rendering],
    embedder: Embedder,
    threshold: float = DEFAULT_THRESHOLD,
) -> list[DriftRow]:
    """Each rendering's distance from its version's anchor, and whether it drifted. A
    row its template refuses (it was never sent) is left out."""
    templates = {v.index: Template.from_canonical(v.template) for v in variants}
    anchors = [
        prompt_text(t.render(anchor_values(t, f"variant {v.name} ({v.prompt_ref})")))
        for v, t in ((v, templates[v.index]) for v in variants)
    ]
    kept: list[Rendering] = []
    texts: list[str] = []
    for rendering in renderings:
        try:
            texts.append(prompt_text(templates[rendering.variant_index].render(rendering.values)))
        except PromptlabError:
            continue
        kept.append(rendering)
    vectors = embedder.embed(anchors + texts)
    anchor_of = {v.index: vectors[i] for i, v in enumerate(variants)}
    rows = []
    for rendering, vector in zip(kept, vectors[len(anchors) :], strict=True):
        distance = cosine_distance(vector, anchor_of[rendering.variant_index])
        rows.append(
            DriftRow(rendering.variant_index, rendering.row_index, distance, distance > threshold)
        )
    return rows


def drift_by_version(
    variants: Sequence[VariantRecord], rows: Sequence[DriftRow]
) -> list[VersionDrift]:
    """Each variant's renderings, drifted ones and the rate's 95% interval."""
    out = []
    for variant in variants:
        mine = [r for r in rows if r.variant_index == variant.index]
        drifted = sum(r.drifted for r in mine)
        out.append(
            VersionDrift(
                variant.name,
                variant.prompt_version_id,
                len(mine),
                drifted,
                wilson_interval(drifted, len(mine)) if mine else Interval(0.0, 1.0),
            )
        )
    return out


def check_run(
    store: Store, run_id: str, embedder: Embedder, threshold: float = DEFAULT_THRESHOLD
) -> list[VersionDrift]:
    """Check every rendering of the run, keep what was found (replacing an earlier
    check) and return each variant's drift rate."""
    rows = DriftStore(store)
    variants = RunStore(store).variants(run_id)
    if not variants:
        raise NotFoundError(f"no run {run_id!r} with variants")
    found = check_drift(variants, rows.renderings(run_id), embedder, threshold)
    now = store.clock.now()
    rows.save(run_id, found, threshold=threshold, embedder=embedder.source, at=now)
    return drift_by_version(variants, found)
