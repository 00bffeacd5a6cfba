"""Cross-model validation: one item through several models, their answers fused.

`crosscheck:` in a run spec sends each row to every model it lists (the spec's one
variant, once per model) and decides each row from their answers:

- **Answer**: the output's JSON value at `field:` (or the whole output), compared as
  text with case and spaces ignored. A model whose request failed, or whose output has
  no such field, abstains.
- **Weights**: each model's macro F1 on the `validation:` dataset (its rows sent through
  the same models in a run of their own when this run ends, so they are recomputed per
  batch), as shares of their sum; without a validation set, equal. Then the documented
  ±5% rule: a model that agreed with the batch's weighted majority more often than the
  others gains up to 5% of its weight, the one that agreed least loses up to 5%
  (linearly between), and the weights are made to sum to 1 again.
- **Agreement**: the weight behind the winning answer (the answer with most weight; a
  tie goes to the heaviest model's) over all models' weight, abstainers included.
- **Confidence**: each model's own figure at `confidence:` in its output (0 to 1; a
  missing one is 0; without `confidence:`, 1), z-scored over the run per model and
  put back on the scale of all models' figures together (mean + sd x z, clipped to
  0..1), so a model that always says 0.99 and one that says 0.7 count alike. The fused
  confidence is the weighted mean over the models behind the winning answer.
- **Decision** (the seed's table): agreement >= 90% and fused >= 0.85 adopt; agreement
  >= 70% and fused >= 0.72 weighted vote; otherwise the row goes to the review queue.
- **Ambiguous**: with `entropy_gap:` (nats; the seed's 1.2), every request asks for its
  tokens' top TOP_LOGPROBS log-probabilities (OpenAI-format endpoints and the simulated
  model give them; Anthropic's API has none). Each answer's mean token entropy is
  stored with its result; a row whose models' entropies differ by more than the gap is
  flagged ambiguous and goes to review, whatever its agreement.
- **Tiebreak**: with `tiebreak:`, the rows the models doubt (low agreement, reasoning
  far apart) are answered by a third model in the same run before they are decided
  (promptlab/evaluation/tiebreak.py); its answer joins the vote with its own weight.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from promptlab.checks.validation import extract_json
from promptlab.errors import ConfigError, SpecError
from promptlab.evaluation.scorers import value_at
from promptlab.evaluation.tiebreak import TieBreak, parse_tiebreak
from promptlab.providers.config import parse_model_ref

FIELDS = frozenset(
    {"models", "field", "confidence", "validation", "adopt", "vote", "entropy_gap", "tiebreak"}
)
#: Log-probabilities asked per token when a cross-check measures its entropy gap.
TOP_LOGPROBS = 5
#: Fewest and most models a cross-check sends each row to.
MIN_MODELS, MAX_MODELS = 2, 5
#: The most a batch's agreement moves a model's weight (the seed's ±5%).
ADJUST = 0.05
#: Longest answer text compared (and stored per model): answers are labels, not essays.
MAX_ANSWER_CHARS = 500
_PATH = re.compile(r"^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}$")


class Decision(StrEnum):
    ADOPT = "adopt"
    VOTE = "vote"
    REVIEW = "review"


@dataclass(frozen=True)
class Threshold:
    agreement: float
    confidence: float


@dataclass(frozen=True)
class CrossCheck:
    """A spec's `crosscheck:` as checked."""

    models: tuple[str, ...]
    field: str | None = None
    confidence: str | None = None
    #: A dataset (a .csv/.jsonl file, or an imported dataset's name) holding the
    #: spec's `expected:` column: each model's F1 there weighs its answers.
    validation: str | Mapping[str, str] | None = None
    adopt: Threshold = Threshold(0.90, 0.85)
    vote: Threshold = Threshold(0.70, 0.72)
    #: Flag a row ambiguous when its models' mean token entropies differ by more (nats).
    entropy_gap: float | None = None
    #: A third model for the rows the others doubt (promptlab/evaluation/tiebreak.py).
    tiebreak: TieBreak | None = None

    @property
    def voters(self) -> tuple[str, ...]:
        """Every model whose answer may count: the cross-checked ones, then the tiebreak."""
        return self.models + ((self.tiebreak.model,) if self.tiebreak is not None else ())


def parse_crosscheck(data: Any) -> CrossCheck:
    """Check `crosscheck:`; a refusal names the field."""
    if not isinstance(data, Mapping):
        raise SpecError("crosscheck: expected a mapping with `models:` (2 to 5 model refs)")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise SpecError(f"crosscheck: unknown field(s) {', '.join(unknown)}")
    models = data.get("models")
    if not isinstance(models, list) or not MIN_MODELS <= len(models) <= MAX_MODELS:
        raise SpecError(
            f"crosscheck.models: expected a list of {MIN_MODELS} to {MAX_MODELS} model refs "
            f"like 'openai:gpt-4o-mini', got {models!r}"
        )
    for i, model in enumerate(models):
        try:
            parse_model_ref(str(model))
        except ConfigError as exc:
            raise SpecError(f"crosscheck.models[{i}]: {exc}") from exc
    if len(set(map(str, models))) != len(models):
        raise SpecError("crosscheck.models: each model once")
    paths = {}
    for key in ("field", "confidence"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not _PATH.match(value)):
            raise SpecError(
                f"crosscheck.{key}: expected a JSON path like 'label' or "
                f"'answer.label', got {value!r}"
            )
        paths[key] = value
    validation = data.get("validation")  # a file or name; stored runs: {name: NAME} too
    if validation is not None and not (
        (isinstance(validation, str) and validation.strip())
        or (isinstance(validation, Mapping) and set(validation) == {"name"})
    ):
        raise SpecError(f"crosscheck.validation: expected a dataset, got {validation!r}")
    gap = data.get("entropy_gap")
    if gap is not None and (
        isinstance(gap, bool) or not isinstance(gap, int | float) or not 0 < gap <= 10
    ):
        raise SpecError(
            f"crosscheck.entropy_gap: expected nats from 0 to 10 (the seed's 1.2), got {gap!r}"
        )
    tiebreak = data.get("tiebreak")
    return CrossCheck(
        models=tuple(map(str, models)),
        tiebreak=None if tiebreak is None else parse_tiebreak(tiebreak, list(map(str, models))),
        validation=validation,
        entropy_gap=None if gap is None else float(gap),
        adopt=_threshold(data.get("adopt"), "adopt", CrossCheck.adopt),
        vote=_threshold(data.get("vote"), "vote", CrossCheck.vote),
        **paths,
    )


def with_crosscheck(
    data: Mapping[str, Any],
    variants: list[Any],
    resolve_dataset: Callable[[Any], tuple[Path | None, str | None]],
) -> tuple[CrossCheck | None, list[Any], Mapping[str, Any]]:
    """A spec's `crosscheck:` checked, its one variant sent once per model (the tiebreak
    model's last: it answers only the rows the others doubt), and the
    spec's data with the validation dataset as stored (a resume reads the same file);
    a spec without one as it is."""
    if "crosscheck" not in data:
        return None, variants, data
    check = parse_crosscheck(data["crosscheck"])
    if data.get("experiment") is not None or len(variants) != 1:
        raise SpecError("crosscheck: give one variant (no experiment): it goes to each model")
    if (
        not isinstance(variants[0], Mapping)
        or "model" in variants[0]
        or data.get("repeats", 1) != 1
    ):
        raise SpecError(
            "crosscheck: the variant names no model (crosscheck.models does) "
            "and the spec no repeats"
        )
    if check.validation is not None and not data.get("expected"):
        raise SpecError("crosscheck.validation: needs `expected:`, the column holding the answer")
    if check.validation is not None:
        path, name = resolve_dataset(check.validation)
        stored: Any = str(path) if path is not None else {"name": name}
        data = {**data, "crosscheck": {**data["crosscheck"], "validation": stored}}
    expanded = [{**variants[0], "name": model, "model": model} for model in check.voters]
    return check, expanded, data


def _threshold(value: Any, where: str, default: Threshold) -> Threshold:
    if value is None:
        return default
    if not isinstance(value, Mapping) or set(value) - {"agreement", "confidence"}:
        raise SpecError(f"crosscheck.{where}: expected {{agreement: 0..1, confidence: 0..1}}")
    figures = {}
    for key in ("agreement", "confidence"):
        figure = value.get(key, getattr(default, key))
        if isinstance(figure, bool) or not isinstance(figure, int | float) or not 0 <= figure <= 1:
            raise SpecError(f"crosscheck.{where}.{key}: expected a number from 0 to 1")
        figures[key] = float(figure)
    return Threshold(**figures)


# ---- answers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One model's answer to one row: the compared text (None: it abstained) and its
    own confidence (None: it gave none)."""

    value: str | None
    confidence: float | None
    #: The output's mean token entropy (nats), when log-probabilities came back.
    entropy: float | None = None


def read_answer(output: str | None, check: CrossCheck, entropy: float | None = None) -> Answer:
    """A model's answer from its output; never raises."""
    if output is None:
        return Answer(None, None)
    if check.field is None and check.confidence is None:
        return Answer(normalize(output), None, entropy)
    try:
        parsed = extract_json(output[:100_000])[0]
    except Exception:  # noqa: BLE001 - no JSON: it gave no answer to compare
        return Answer(None, None, entropy)
    value = value_at(parsed, check.field)[1] if check.field else output
    confidence = value_at(parsed, check.confidence)[1] if check.confidence else None
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not 0 <= confidence <= 1
    ):
        confidence = None
    text = None if value is None else normalize(value)
    return Answer(text or None, None if confidence is None else float(confidence), entropy)


def normalize(value: Any) -> str:
    """The text two answers are compared by: case and runs of spaces ignored."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return " ".join(text.casefold().split())[:MAX_ANSWER_CHARS]


# ---- weights ---------------------------------------------------------------------------


def macro_f1(pairs: Sequence[tuple[str | None, str]]) -> float:
    """Macro F1 of (answer, expected) pairs over the expected classes; an abstention
    is a miss."""
    classes = {expected for _, expected in pairs}
    if not classes:
        return 0.0
    total = 0.0
    for c in classes:
        tp = sum(1 for got, want in pairs if got == c and want == c)
        fp = sum(1 for got, want in pairs if got == c and want != c)
        fn = sum(1 for got, want in pairs if got != c and want == c)
        total += 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return total / len(classes)


def weights_from_f1(f1: Mapping[str, float]) -> dict[str, float]:
    """Each model's F1 as a share of their sum; equal when every F1 is 0."""
    total = sum(f1.values())
    if total <= 0:
        return {m: 1 / len(f1) for m in f1}
    return {m: value / total for m, value in f1.items()}


def adjust_weights(weights: Mapping[str, float], agreed: Mapping[str, float]) -> dict[str, float]:
    """The ±5% rule: `agreed` is each model's share of rows where it backed the
    batch's winning answer; the most agreeing gains ADJUST of its weight, the least
    loses it, linearly between; then the weights sum to 1 again."""
    mean = sum(agreed.values()) / len(agreed)
    spread = max(abs(a - mean) for a in agreed.values())
    moved = {
        m: w * (1 + ADJUST * ((agreed[m] - mean) / spread if spread > 0 else 0.0))
        for m, w in weights.items()
    }
    total = sum(moved.values())
    return {m: w / total for m, w in moved.items()}


# ---- confidences and decisions -----------------------------------------------------------


@dataclass
class Moments:
    """Running mean and sd of confidences (Welford)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)

    @property
    def sd(self) -> float:
        return math.sqrt(self.m2 / self.n) if self.n > 1 else 0.0


@dataclass(frozen=True)
class Scale:
    """Per-model confidence moments over the run and those of all models pooled."""

    per_model: Mapping[str, Moments]
    pooled: Moments

    def normalized(self, model: str, confidence: float) -> float:
        own = self.per_model.get(model)
        z = (confidence - own.mean) / own.sd if own is not None and own.sd > 0 else 0.0
        return min(1.0, max(0.0, self.pooled.mean + self.pooled.sd * z))


def raw_confidence(answer: Answer, check: CrossCheck) -> float | None:
    """The figure a model vouched with: its own, 0 when it gave none, 1 when none is
    asked for; None when it abstained."""
    if answer.value is None:
        return None
    if check.confidence is None:
        return 1.0
    return answer.confidence if answer.confidence is not None else 0.0


@dataclass(frozen=True)
class RowDecision:
    decision: Decision
    answer: str | None
    agreement: float
    confidence: float | None
    #: Per model: its answer, raw and normalized confidence, weight and entropy.
    inputs: Mapping[str, Mapping[str, Any]]
    #: The spread of the models' mean token entropies, and whether it flags the row.
    entropy_gap: float | None = None
    ambiguous: bool = False


def winner(answers: Mapping[str, Answer], weights: Mapping[str, float]) -> str | None:
    """The answer with most weight behind it (a tie: the heaviest model's)."""
    votes: dict[str, float] = {}
    for model, answer in answers.items():
        if answer.value is not None:
            votes[answer.value] = votes.get(answer.value, 0.0) + weights[model]
    if not votes:
        return None
    heaviest: dict[str, float] = {}
    for model in sorted(answers, key=lambda m: -weights[m]):
        value = answers[model].value
        if value is not None:
            heaviest.setdefault(value, weights[model])
    return max(votes, key=lambda v: (round(votes[v], 9), heaviest[v]))


def decide(
    answers: Mapping[str, Answer],
    weights: Mapping[str, float],
    scale: Scale,
    check: CrossCheck,
) -> RowDecision:
    """One row's decision from its models' answers (see the module docstring)."""
    best = winner(answers, weights)
    inputs: dict[str, dict[str, Any]] = {}
    backing = fused = 0.0
    for model, answer in answers.items():
        raw = raw_confidence(answer, check)
        normal = None if raw is None else scale.normalized(model, raw)
        inputs[model] = {
            "answer": answer.value,
            "confidence": raw,
            "normalized": normal,
            "weight": round(weights[model], 6),
            "entropy": answer.entropy,
        }
        if best is not None and answer.value == best and normal is not None:
            backing += weights[model]
            fused += weights[model] * normal
    total = sum(weights[m] for m in answers)
    agreement = backing / total if total > 0 else 0.0
    confidence = fused / backing if backing > 0 else None
    entropies = [a.entropy for a in answers.values() if a.entropy is not None]
    gap = max(entropies) - min(entropies) if len(entropies) > 1 else None
    ambiguous = gap is not None and check.entropy_gap is not None and gap > check.entropy_gap
    decision = Decision.REVIEW
    if best is not None and confidence is not None and not ambiguous:
        for threshold, verdict in ((check.adopt, Decision.ADOPT), (check.vote, Decision.VOTE)):
            if _meets(agreement, threshold.agreement) and _meets(confidence, threshold.confidence):
                decision = verdict
                break
    return RowDecision(decision, best, agreement, confidence, inputs, gap, ambiguous)


def _meets(figure: float, threshold: float) -> bool:
    return figure >= threshold - 1e-9  # 2 of 3 equal weights is 0.666..., 0.9 means 0.9
