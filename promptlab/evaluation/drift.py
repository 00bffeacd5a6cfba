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

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptlab.analysis.stats import Interval, wilson_interval
from promptlab.data.datasets import DatasetStore
from promptlab.errors import NotFoundError, PromptlabError, SpecError, TemplateError
from promptlab.prompts.templates import Template, coerce_text_values
from promptlab.providers.config import EndpointConfig
from promptlab.providers.embeddings import Embedder, cosine_distance
from promptlab.records import VariantRecord
from promptlab.store.connection import Store
from promptlab.store.drift import DriftRow, DriftStore, Rendering
from promptlab.store.runs import RunStore

#: Rows of a reference dataset whose renderings make a version's anchor (their centroid).
MAX_REFERENCE_ROWS = 500
#: Renderings embedded at a time: a run of any size holds this many texts and vectors.
CHUNK = 512

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
    #: The distance past which its renderings drifted (None: it had none).
    threshold: float | None = None

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
    threshold: float | None = None,
    reference: Sequence[Mapping[str, Any]] | None = None,
) -> list[DriftRow]:
    """Each rendering's distance from its version's anchor, and whether it drifted past
    `threshold` (None: the version's own `drift_threshold`, else DEFAULT_THRESHOLD). A
    row its template refuses (it was never sent) is left out. The anchor is the version
    rendered with its typical values, or, given `reference` rows, the centroid of its
    renderings of them."""
    templates = {v.index: Template.from_canonical(v.template) for v in variants}
    limit = {
        index: threshold or template.drift_threshold or DEFAULT_THRESHOLD
        for index, template in templates.items()
    }
    anchor_of = _anchors(variants, templates, embedder, reference)
    rows: list[DriftRow] = []
    # A chunk at a time: only its texts and vectors are held, each rendering's distance kept.
    for start in range(0, len(renderings), CHUNK):
        kept: list[Rendering] = []
        texts: list[str] = []
        for rendering in renderings[start : start + CHUNK]:
            text = _rendered(templates[rendering.variant_index], rendering.values)
            if text is not None:
                kept.append(rendering)
                texts.append(text)
        for rendering, vector in zip(kept, embedder.embed(texts), strict=True):
            index = rendering.variant_index
            distance = cosine_distance(vector, anchor_of[index])
            drifted = distance > limit[index]
            rows.append(DriftRow(index, rendering.row_index, distance, drifted, limit[index]))
    return rows


def _rendered(template: Template, values: Mapping[str, Any]) -> str | None:
    """The prompt as the engine sends it (a CSV cell's text taken as its declared type,
    promptlab/prompts/templates.py coerce_text_values); None when the template refuses
    the row (it was never sent)."""
    try:
        return prompt_text(template.render(coerce_text_values(template, dict(values))))
    except PromptlabError:
        return None


def _anchors(
    variants: Sequence[VariantRecord],
    templates: Mapping[int, Template],
    embedder: Embedder,
    reference: Sequence[Mapping[str, Any]] | None,
) -> dict[int, list[float]]:
    """Each variant's anchor: its typical prompt's embedding, or the centroid of its
    renderings of the reference rows (those its template refuses left out)."""
    if reference is None:
        texts = [
            prompt_text(t.render(anchor_values(t, f"variant {v.name} ({v.prompt_ref})")))
            for v, t in ((v, templates[v.index]) for v in variants)
        ]
        return {v.index: vector for v, vector in zip(variants, embedder.embed(texts), strict=True)}
    anchors = {}
    for variant in variants:
        rendered = (_rendered(templates[variant.index], row) for row in reference)
        texts = [text for text in rendered if text is not None][:MAX_REFERENCE_ROWS]
        if not texts:
            raise TemplateError(
                f"variant {variant.name} ({variant.prompt_ref}): its template refuses every "
                "row of the reference dataset, so it has no typical prompt to measure from"
            )
        vectors = embedder.embed(texts)
        anchors[variant.index] = [
            sum(column) / len(vectors) for column in zip(*vectors, strict=True)
        ]
    return anchors


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
                wilson_interval(drifted, len(mine)),  # (0, 1) for none
                mine[0].threshold if mine else None,
            )
        )
    return out


def check_setup(
    model: str, reference: str | None, endpoints: Mapping[str, EndpointConfig], store: Store
) -> None:
    """A spec's `drift:` as a submit checks it: its embedder is an endpoint that has
    embeddings (its key set), its reference dataset exists; SpecError names the field."""
    try:
        Embedder.of(model, endpoints, os.environ)
    except PromptlabError as exc:
        raise SpecError(f"drift.model: {exc}") from exc
    if reference is not None:
        try:
            DatasetStore(store).get(reference)
        except NotFoundError as exc:
            raise SpecError(f"drift.reference: {exc}") from exc


def check_run(
    store: Store,
    run_id: str,
    embedder: Embedder,
    threshold: float | None = None,
    reference: str | None = None,
) -> list[VersionDrift]:
    """Check every rendering of the run past `threshold` (None: each version's own, else
    DEFAULT_THRESHOLD), against the centroid of the `reference` dataset's first
    MAX_REFERENCE_ROWS rows when named, keep what was found (replacing an earlier check)
    and return each variant's drift rate."""
    rows = DriftStore(store)
    variants = RunStore(store).variants(run_id)
    if not variants:
        raise NotFoundError(f"no run {run_id!r} with variants")
    typical = None
    if reference is not None:
        typical = list(DatasetStore(store).iter_rows(reference, MAX_REFERENCE_ROWS))
    found = check_drift(variants, rows.renderings(run_id), embedder, threshold, typical)
    now = store.clock.now()
    source = embedder.source + (f", from dataset {reference}" if reference else "")
    rows.save(run_id, found, embedder=source, at=now)
    return drift_by_version(variants, found)
