"""A third model on disagreement (the design article's section 4.3): `crosscheck.tiebreak`.

When a cross-check's models answered every row, each row is measured before it is
decided: its agreement (the models weighing alike: weights from a validation set come
only after the run ends) and its chain divergence, 1 - the cosine similarity of the
embeddings of two models' reasoning (the text at `chain:` in each output, else the whole
output; with more than two models, the two furthest apart). A row whose agreement is
below `agreement_below`, or whose divergence is above `chain_divergence_above`, is sent
to the tiebreak model in the same run, and its answer joins the vote with `weight`
(on the scale where the cross-checked models' weights sum to 1). Each row's figures are
stored (`crosscheck_rounds`), so a resumed run measures only the rows it had not, and
sends only the re-inferences not yet answered.

The default weight, 1, lets a tiebreak settle a split between two equal models by a
weighted vote (75% agreement) but never carry a row alone against all of them (a tie at
50%, which goes to review).
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptlab.checks.validation import extract_json
from promptlab.errors import ConfigError, PromptlabError, SpecError
from promptlab.evaluation.scorers import value_at
from promptlab.providers.config import EndpointConfig, parse_model_ref
from promptlab.providers.embeddings import Embedder, cosine_distance

FIELDS = frozenset({"model", "weight", "when", "chain", "embeddings"})
WHEN = frozenset({"agreement_below", "chain_divergence_above"})
#: The design article's figures: re-infer when the models agree on less than 65%, or
#: their reasoning is more than 35% apart.
AGREEMENT_BELOW, CHAIN_DIVERGENCE_ABOVE = 0.65, 0.35
#: Where chains are embedded unless `embeddings:` names an endpoint's model.
DEFAULT_EMBEDDINGS = "sim:embed"
_PATH = re.compile(r"^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}$")


@dataclass(frozen=True)
class TieBreak:
    """A cross-check's `tiebreak:` as checked; a threshold None is not watched."""

    model: str
    weight: float = 1.0
    agreement_below: float | None = AGREEMENT_BELOW
    chain_divergence_above: float | None = CHAIN_DIVERGENCE_ABOVE
    #: The JSON path of each output's reasoning (None: the whole output).
    chain: str | None = None
    embeddings: str = DEFAULT_EMBEDDINGS

    def doubts(self, agreement: float, divergence: float | None) -> bool:
        """Whether a row with these figures is sent to the tiebreak model."""
        low = self.agreement_below is not None and agreement < self.agreement_below - 1e-9
        apart = (
            self.chain_divergence_above is not None
            and divergence is not None
            and divergence > self.chain_divergence_above + 1e-9
        )
        return low or apart

    def check_embedder(self, endpoints: Mapping[str, EndpointConfig]) -> None:
        """Refuse at submit an embedder the providers file does not give (SpecError)."""
        try:
            Embedder.of(self.embeddings, endpoints, os.environ)
        except PromptlabError as exc:
            raise SpecError(f"crosscheck.tiebreak.embeddings: {exc}") from exc


def parse_tiebreak(data: Any, models: Sequence[str]) -> TieBreak:
    """Check `crosscheck.tiebreak`; a refusal names the field."""
    where = "crosscheck.tiebreak"
    if not isinstance(data, Mapping) or "model" not in data:
        raise SpecError(f"{where}: expected {{model: ENDPOINT:MODEL, when: {{...}}}}")
    unknown = sorted(set(map(str, data)) - FIELDS)
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)}")
    model = str(data["model"])
    for key, ref in (("model", model), ("embeddings", data.get("embeddings"))):
        try:
            if ref is not None:
                parse_model_ref(str(ref))
        except ConfigError as exc:
            raise SpecError(f"{where}.{key}: {exc}") from exc
    if model in models:
        raise SpecError(f"{where}.model: {model} is already one of crosscheck.models")
    weight = data.get("weight", TieBreak.weight)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 10:
        raise SpecError(f"{where}.weight: expected a number above 0 and at most 10, got {weight!r}")
    chain = data.get("chain")
    if chain is not None and (not isinstance(chain, str) or not _PATH.match(chain)):
        raise SpecError(f"{where}.chain: expected a JSON path like 'reasoning', got {chain!r}")
    return TieBreak(
        model,
        float(weight),
        *_when(data.get("when"), where),
        chain=chain,
        embeddings=str(data.get("embeddings", DEFAULT_EMBEDDINGS)),
    )


def _when(value: Any, where: str) -> tuple[float | None, float | None]:
    """The two thresholds: both the article's when `when:` is absent, else those given."""
    if value is None:
        return AGREEMENT_BELOW, CHAIN_DIVERGENCE_ABOVE
    if not isinstance(value, Mapping) or not value or set(map(str, value)) - WHEN:
        raise SpecError(
            f"{where}.when: expected {{agreement_below: 0..1, chain_divergence_above: 0..2}}"
        )
    figures: list[float | None] = []
    for key, top in (("agreement_below", 1.0), ("chain_divergence_above", 2.0)):
        figure = value.get(key)
        if figure is not None and (
            isinstance(figure, bool)
            or not isinstance(figure, int | float)
            or not 0 <= figure <= top
        ):
            raise SpecError(f"{where}.when.{key}: expected a number from 0 to {top:g}")
        figures.append(None if figure is None else float(figure))
    return figures[0], figures[1]


def chain_text(output: str | None, chain: str | None) -> str | None:
    """The reasoning an output gives: its text at the `chain` path (JSON), or all of
    it; None when it gave none (a failed request, no such field)."""
    if output is None or chain is None:
        return output
    try:
        parsed = extract_json(output[:100_000])[0]
    except Exception:  # noqa: BLE001 - no JSON: no reasoning to compare
        return None
    value = value_at(parsed, chain)[1]
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def chain_divergence(vectors: Sequence[Sequence[float]]) -> float | None:
    """The largest cosine distance between two of the chains' embeddings; None with
    fewer than two chains."""
    pairs = itertools.combinations(vectors, 2)
    return max((cosine_distance(a, b) for a, b in pairs), default=None)
