"""A cross-checked run's end: weigh its models, decide each row, queue the doubtful.

With `crosscheck.validation`, the run's end starts a validation run (`validate
crosscheck: RUN NAME`: the validation dataset through the same models, recorded, traced
and costed like any run), and that run's end weighs each model by its F1 there and
decides the cross-checked run; without one, the models weigh alike and the run is
decided at once. Each row's decision, with every model's answer, confidence and weight,
is stored (`crosscheck_decisions`); rows decided `review` go to the review queue. A
resumed run is decided again whole (its open review items with it; decided ones stay).

With `crosscheck.tiebreak`, the run measures its rows before it ends (`measure_rows`,
called by engine/rounds.py) and sends the doubted ones to the tiebreak model; a row it
answered is decided with that answer too, at the tiebreak's own weight.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from promptlab.evaluation.crosscheck import (
    Answer,
    CrossCheck,
    Decision,
    Moments,
    RowDecision,
    Scale,
    adjust_weights,
    decide,
    macro_f1,
    normalize,
    raw_confidence,
    read_answer,
    weights_from_f1,
    winner,
)
from promptlab.evaluation.tiebreak import chain_divergence, chain_text
from promptlab.records.review import ReviewSource, WeightRecord
from promptlab.store.audit import AuditLog
from promptlab.store.connection import Store
from promptlab.store.crosscheck import CrosscheckStore
from promptlab.store.review import ReviewStore
from promptlab.store.runs import RunStore
from promptlab.store.scores import ScoreStore

if TYPE_CHECKING:
    from promptlab.engine.spec.runspec import RunSpec

#: Who queued what a cross-check sent to review (the audit's actor).
ACTOR = "crosscheck"


def crosscheck_ended(
    store: Store, run_id: str, spec: RunSpec, submit: Callable[[Mapping[str, Any]], str]
) -> str | None:
    """Decide the ended cross-checked run now, or start its validation run (whose id is
    returned; `submit` takes its spec mapping) to weigh the models first."""
    assert spec.crosscheck is not None
    if spec.crosscheck.validation is None:
        decide_run(store, run_id, spec.crosscheck)
        return None
    raw = dict(spec.raw)
    check = {k: v for k, v in raw["crosscheck"].items() if k != "validation"}
    data = {k: v for k, v in raw.items() if k not in ("name", "schedule", "after", "limit_rows")}
    data |= {
        "name": f"validate crosscheck: {spec.name}"[:200],
        "crosscheck": check,
        "dataset": raw["crosscheck"]["validation"],
        "validating": run_id,
    }
    scorers = [s for s in raw.get("scorers") or [] if _plain(s)]  # judges judge the run
    data.pop("scorers", None)
    if scorers:
        data["scorers"] = scorers
    return submit(data)


def _plain(scorer: Any) -> bool:
    return not (isinstance(scorer, Mapping) and scorer.get("kind") == "judge")


def validation_ended(store: Store, validation_run_id: str, spec: RunSpec) -> int:
    """Weigh each model by its macro F1 on the validation run, then decide the run it
    validates; the rows decided."""
    assert spec.crosscheck is not None and spec.validating is not None and spec.expected
    pairs: dict[str, list[tuple[str | None, str]]] = {m: [] for m in spec.crosscheck.models}
    for batch in ScoreStore(store).finished_results(validation_run_id):
        for r in batch:
            want = r.row.get(spec.expected)
            if want is None or str(want).strip() == "" or r.variant not in pairs:
                continue
            got = read_answer(r.output if r.succeeded else None, spec.crosscheck).value
            pairs[r.variant].append((got, normalize(want)))
    f1 = {model: macro_f1(p) for model, p in pairs.items()}
    return decide_run(store, spec.validating, spec.crosscheck, f1, validation_run_id)


@dataclass(frozen=True)
class RoundRow:
    """A row measured before it is decided: its agreement (the models weighing alike),
    its chain divergence (None with fewer than two chains) and whether it is re-inferred."""

    row_index: int
    agreement: float
    divergence: float | None
    reinfer: bool


#: Rows whose chains are embedded at a time: a run of any size holds this many rows'
#: texts and vectors (5 models x 1,536 floats each, with OpenAI's small model).
ROUND_ROWS = 256


def measure_rows(
    store: Store, run_id: str, check: CrossCheck, embed: Callable[[list[str]], list[list[float]]]
) -> Iterator[list[RoundRow]]:
    """The rows of a cross-checked run not yet measured, ROUND_ROWS at a time, each
    measured for its tiebreak (promptlab/evaluation/tiebreak.py); `embed` embeds texts."""
    tiebreak = check.tiebreak
    assert tiebreak is not None
    crosschecks = CrosscheckStore(store)
    measured = crosschecks.measured_rows(run_id)
    equal = {m: 1 / len(check.models) for m in check.models}
    for batch in crosschecks.row_outputs(run_id):
        todo = [(row, outputs) for row, outputs in batch if row not in measured]
        for start in range(0, len(todo), ROUND_ROWS):
            rows = todo[start : start + ROUND_ROWS]
            chains = [
                [chain_text(outputs.get(m, (None, None))[0], tiebreak.chain) for m in check.models]
                for _row, outputs in rows
            ]
            texts = [text for chain in chains for text in chain if text is not None]
            vectors = iter(embed(texts) if texts else [])
            out = []
            for (row, outputs), chain in zip(rows, chains, strict=True):
                answers = _answers(outputs, check, check.models)
                best = winner(answers, equal)
                agreement = sum(equal[m] for m, a in answers.items() if best and a.value == best)
                divergence = chain_divergence([next(vectors) for t in chain if t is not None])
                out.append(
                    RoundRow(row, agreement, divergence, tiebreak.doubts(agreement, divergence))
                )
            yield out


def decide_run(
    store: Store,
    run_id: str,
    check: CrossCheck,
    f1: Mapping[str, float] | None = None,
    validation_run_id: str | None = None,
) -> int:
    """Decide every row of the run and queue the `review` ones; the rows decided."""
    models = check.models
    base = weights_from_f1(f1) if f1 else {m: 1 / len(models) for m in models}
    crosschecks = CrosscheckStore(store)
    # First pass: each model's confidences over the run, and how often it backed the
    # winning answer (the ±5% rule's input).
    per_model = {m: Moments() for m in models}
    pooled, agreed, rows = Moments(), Counter[str](), 0
    if check.tiebreak is not None:  # its confidences on their own scale; it is not weighed
        per_model[check.tiebreak.model] = Moments()
    for batch in crosschecks.row_outputs(run_id):
        for _row, outputs in batch:
            answers = _answers(outputs, check, check.models)
            best, rows = winner(answers, base), rows + 1
            for model, answer in answers.items():
                raw = raw_confidence(answer, check)
                if raw is not None:
                    per_model[model].add(raw)
                    pooled.add(raw)
                if best is not None and answer.value == best:
                    agreed[model] += 1
            for model, answer in _answers(outputs, check, _third(outputs, check)).items():
                raw = raw_confidence(answer, check)
                if raw is not None:
                    per_model[model].add(raw)
    weights = adjust_weights(base, {m: agreed[m] / rows for m in models}) if rows else base
    crosschecks.clear(run_id)
    crosschecks.put_weights(
        run_id,
        [
            WeightRecord(
                m, validation_run_id, None if f1 is None else f1.get(m, 0.0), base[m], weights[m]
            )
            for m in models
        ]
        + [WeightRecord(t.model, None, None, t.weight, t.weight) for t in [check.tiebreak] if t],
    )
    voting = {
        **weights,
        **({check.tiebreak.model: check.tiebreak.weight} if check.tiebreak else {}),
    }
    return _decide_rows(store, run_id, check, voting, Scale(per_model, pooled))


def _decide_rows(
    store: Store, run_id: str, check: CrossCheck, weights: Mapping[str, float], scale: Scale
) -> int:
    crosschecks, reviews = CrosscheckStore(store), ReviewStore(store)
    reviews.clear_open(run_id, ReviewSource.CROSSCHECK)
    now = store.clock.now()
    counts: Counter[str] = Counter()
    reinferred = 0  # rows the tiebreak model answered
    for batch in crosschecks.row_outputs(run_id):
        decided, queued = [], []
        for row, outputs in batch:
            third = _third(outputs, check)
            answers = _answers(outputs, check, (*check.models, *third))
            d = decide(answers, weights, scale, check)
            counts[d.decision] += 1
            reinferred += bool(third)
            decided.append(
                (
                    row,
                    str(d.decision),
                    d.answer,
                    d.agreement,
                    d.confidence,
                    json.dumps(d.inputs),
                    d.entropy_gap,
                    d.ambiguous,
                )
            )
            if d.decision == Decision.REVIEW:
                queued.append(
                    (
                        run_id,
                        row,
                        None,
                        str(ReviewSource.CROSSCHECK),
                        review_reason(d, check),
                        d.answer,
                    )
                )
        crosschecks.add_decisions(run_id, decided, now)
        reviews.add(queued, ACTOR, now)
    name = RunStore(store).get_run(run_id).name
    payload: dict[str, Any] = {"run": name, "decisions": dict(counts), "weights": dict(weights)}
    if check.tiebreak is not None:
        payload["reinferred"] = reinferred
    AuditLog(store).record_change("crosscheck.decided", ACTOR, payload, run_id=run_id)
    return sum(counts.values())


def _third(outputs: Mapping[str, Any], check: CrossCheck) -> tuple[str, ...]:
    """The tiebreak model, when it answered the row (it was re-inferred)."""
    tiebreak = check.tiebreak
    return (tiebreak.model,) if tiebreak is not None and tiebreak.model in outputs else ()


def _answers(
    outputs: Mapping[str, tuple[str | None, float | None]],
    check: CrossCheck,
    models: Iterable[str],
) -> dict[str, Answer]:
    """Each of `models`' answers to a row (a model with no output abstains)."""
    answers = {}
    for model in models:
        output, entropy = outputs.get(model, (None, None))
        answers[model] = read_answer(output, check, entropy)
    return answers


def review_reason(d: RowDecision, check: CrossCheck) -> str:
    """Why a row went to review, with its figures and the line it missed."""
    if d.ambiguous:
        return (
            f"ambiguous: the models' token entropies differ by {d.entropy_gap:.2f} nats "
            f"(over {check.entropy_gap})"
        )
    if d.answer is None:
        return "no model gave an answer"
    confidence = "no confidence" if d.confidence is None else f"confidence {d.confidence:.2f}"
    why = "models disagree" if d.agreement < check.vote.agreement - 1e-9 else "low confidence"
    tiebreak = check.tiebreak
    if tiebreak is not None and tiebreak.model in d.inputs:
        why += f" after {tiebreak.model} re-inferred it"
    return (
        f"{why}: agreement {d.agreement:.0%}, {confidence} (a weighted vote needs "
        f"{check.vote.agreement:.0%} and {check.vote.confidence:.2f})"
    )
