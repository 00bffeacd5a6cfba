"""Cross-model validation: the fusion's arithmetic (F1 weights, the ±5% rule, z-scored
confidences, the decision table), spec refusals, and runs end to end on three scripted
models of known agreement: exactly the rows they disagree on go to review; with a
validation set, its F1 weighs them, and the weighted vote decides what it may."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import SpecError
from promptlab.evaluation.crosscheck import (
    ADJUST,
    Answer,
    CrossCheck,
    Decision,
    Moments,
    Scale,
    adjust_weights,
    decide,
    macro_f1,
    read_answer,
    weights_from_f1,
)
from promptlab.evaluation.ended import run_ended
from promptlab.providers.base import CompletionRequest
from promptlab.records import RunStatus
from promptlab.store import Store
from promptlab.store.audit import AuditFilter, AuditLog
from promptlab.store.crosscheck import CrosscheckStore
from promptlab.store.review import ReviewStore
from promptlab.store.runs import RunStore
from tests.test_run_dependencies import ENDPOINTS

MODELS = ["fake:a", "fake:b", "fake:c"]
CHECK = CrossCheck(models=tuple(MODELS), field="label", confidence="confidence")


def flat(**confidences: float) -> Scale:
    """A scale where every model's confidences are spread alike (normalizing is a no-op)."""
    moments = {m: Moments() for m in confidences}
    pooled = Moments()
    for m in confidences:
        for x in (0.5, 1.0):
            moments[m].add(x)
            pooled.add(x)
    return Scale(moments, pooled)


def test_macro_f1_counts_every_expected_class_and_abstentions_as_misses() -> None:
    assert macro_f1([("a", "a"), ("b", "b")]) == 1.0
    # class a: tp 1, fp 1, fn 1 (the abstention) -> 2/4; class b: tp 0 -> 0.
    assert macro_f1([("a", "a"), (None, "a"), ("a", "b")]) == pytest.approx((0.5 + 0) / 2)
    assert macro_f1([]) == 0.0


def test_weights_are_f1_shares_and_the_batch_moves_them_at_most_five_percent() -> None:
    assert weights_from_f1({"a": 0.9, "b": 0.6, "c": 0.0}) == pytest.approx(
        {"a": 0.6, "b": 0.4, "c": 0.0}
    )
    assert weights_from_f1({"a": 0.0, "b": 0.0}) == {"a": 0.5, "b": 0.5}
    base = {"a": 0.5, "b": 0.3, "c": 0.2}
    moved = adjust_weights(base, {"a": 1.0, "b": 0.8, "c": 0.6})
    assert sum(moved.values()) == pytest.approx(1.0)
    for model, weight in base.items():  # before renormalizing: within ±ADJUST of itself
        assert abs(moved[model] / weight - 1) <= 2 * ADJUST + 1e-9
    assert moved["a"] > base["a"] and moved["c"] < base["c"]
    assert adjust_weights(base, {"a": 0.7, "b": 0.7, "c": 0.7}) == pytest.approx(base)


def test_confidences_are_z_scored_per_model_onto_the_pooled_scale() -> None:
    # Model x always says about 0.99, model y about 0.6: each one's own average maps to
    # the same place, and a figure above a model's own average maps above it.
    x, y, pooled = Moments(), Moments(), Moments()
    for a, b in ((0.98, 0.5), (0.99, 0.6), (1.0, 0.7)):
        x.add(a), y.add(b), pooled.add(a), pooled.add(b)
    scale = Scale({"x": x, "y": y}, pooled)
    assert scale.normalized("x", 0.99) == pytest.approx(scale.normalized("y", 0.6))
    assert scale.normalized("y", 0.7) > scale.normalized("y", 0.6)
    assert 0.0 <= scale.normalized("x", -5) <= scale.normalized("x", 5) <= 1.0


@pytest.mark.parametrize(
    ("answers", "confidence", "decision"),
    [
        (["x", "x", "x"], 0.9, Decision.ADOPT),  # 100% and 0.9
        (["x", "x", "x"], 0.8, Decision.VOTE),  # 100% but only 0.8
        (["x", "x", "y"], 0.9, Decision.VOTE),  # 0.5 + 0.3 = 80%
        (["x", "y", "x"], 0.9, Decision.VOTE),  # 0.5 + 0.2 = 70% reaches the vote line
        (["y", "x", "x"], 0.9, Decision.REVIEW),  # 50%
        (["x", "x", "x"], 0.7, Decision.REVIEW),  # everyone agrees, nobody is sure
        ([None, None, None], 0.9, Decision.REVIEW),
    ],
)
def test_the_decision_table(answers: list[str | None], confidence: float, decision: str) -> None:
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    given = {m: Answer(v, confidence) for m, v in zip(weights, answers, strict=True)}
    check = CrossCheck(models=tuple(weights), field="label", confidence="confidence")
    got = decide(given, weights, flat(a=1, b=1, c=1), check)
    assert got.decision == decision
    assert set(got.inputs) == {"a", "b", "c"} and "weight" in got.inputs["a"]


def test_an_answer_is_read_from_its_field_and_a_broken_output_abstains() -> None:
    assert read_answer('{"label": " Billing ", "confidence": 0.8}', CHECK) == Answer("billing", 0.8)
    assert read_answer('{"label": "x", "confidence": 7}', CHECK) == Answer("x", None)
    assert read_answer("not json", CHECK) == Answer(None, None)
    assert read_answer(None, CHECK) == Answer(None, None)
    assert read_answer("  Yes  ", CrossCheck(models=("a", "b"))) == Answer("yes", None)


@pytest.mark.parametrize(
    ("crosscheck", "message"),
    [
        ({"models": ["fake:a"]}, r"crosscheck.models: expected a list of 2 to 5"),
        ({"models": ["fake:a", "nocolon"]}, r"crosscheck.models\[1\]"),
        ({"models": ["fake:a", "fake:a"]}, "each model once"),
        ({"models": MODELS, "field": "a b"}, r"crosscheck.field: expected a JSON path"),
        ({"models": MODELS, "adopt": {"agreement": 2}}, r"crosscheck.adopt.agreement"),
        ({"models": MODELS, "validation": "v.csv"}, r"crosscheck.validation: needs `expected:`"),
        ({"models": MODELS, "judge": 1}, r"crosscheck: unknown field\(s\) judge"),
        ({"models": MODELS, "entropy_gap": 0}, r"crosscheck.entropy_gap: expected nats"),
    ],
)
def test_a_bad_crosscheck_is_refused_naming_the_field(crosscheck: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({"dataset": "rows.csv", "variants": [{"prompt": "p"}], "crosscheck": crosscheck})


def test_a_crosscheck_sends_its_one_variant_to_each_model() -> None:
    spec = parse_spec(
        {"dataset": "rows.csv", "variants": [{"prompt": "p"}], "crosscheck": {"models": MODELS}}
    )
    assert [(v.name, v.model) for v in spec.variants] == [(m, m) for m in MODELS]
    with pytest.raises(SpecError, match="give one variant"):
        parse_spec(
            {
                "dataset": "rows.csv",
                "variants": [{"prompt": "p"}, {"prompt": "q"}],
                "crosscheck": {"models": MODELS},
            }
        )


# ---- end to end on three scripted models ------------------------------------------------

#: What each scripted model gets wrong (row -> its answer), and the truth: row i is
#: class `c{i % 3}`. Rows 4 and 7 split one against two; row 9 splits three ways.
WRONG = {"fake:a": {9: "c9"}, "fake:b": {4: "zz", 9: "zz"}, "fake:c": {7: "zz", 9: "yy"}}
ROWS = 12


def truth(row: int) -> str:
    return f"c{row % 3}"


def scripted(request: CompletionRequest) -> str:
    """Model `request.model` answers the row named in the prompt, with its confidence."""
    row = int(request.messages[-1]["content"].split()[-1])
    label = WRONG[f"fake:{request.model}"].get(row, truth(row))
    return json.dumps({"label": label, "confidence": 0.9})


def _dataset(path: Path, rows: range, expected: bool = False) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for i in rows:
            writer.writerow([f"row {i}", truth(i) if expected else ""])
    return path


def _spec(dataset: Path, **crosscheck: Any) -> Any:
    messages = [{"role": "user", "content": "Classify {{ text }}"}]
    return parse_spec(
        {
            "name": "triage cross-check",
            "dataset": str(dataset),
            "expected": "label",
            "variants": [{"messages": messages, "params": {"max_tokens": 20}}],
            "crosscheck": {
                "models": MODELS,
                "field": "label",
                "confidence": "confidence",
                **crosscheck,
            },
        }
    )


@pytest.fixture
def engine(db_path: Path) -> Iterator[tuple[Store, Engine]]:
    provider = ScriptedProvider(answer=scripted)
    with (
        Store(db_path) as store,
        Engine(
            store,
            endpoints=ENDPOINTS,
            provider_factory=lambda _cfg: provider,
            on_run_ended=run_ended,
        ) as eng,
    ):
        yield store, eng


def _decisions(store: Store, run_id: str) -> dict[int, str]:
    with store.read() as cur:
        rows = cur.execute(
            "SELECT row_index, decision FROM crosscheck_decisions WHERE run_id = ?", [run_id]
        ).fetchall()
    return dict(rows)


def test_exactly_the_rows_the_models_disagree_on_go_to_review(
    tmp_path: Path, engine: tuple[Store, Engine]
) -> None:
    store, eng = engine
    run_id = eng.submit(_spec(_dataset(tmp_path / "rows.csv", range(ROWS))))
    assert eng.wait(run_id, timeout=60).status == RunStatus.COMPLETED
    decisions = _decisions(store, run_id)
    assert len(decisions) == ROWS
    # Equal weights: one model against two is 67% agreement, under the vote's 70%.
    assert {r for r, d in decisions.items() if d == "review"} == {4, 7, 9}
    assert {d for r, d in decisions.items() if r not in (4, 7, 9)} == {"adopt"}
    queued = ReviewStore(store).items("open", run_id)
    assert [(i.row_index, i.source, i.proposed) for i in queued] == [
        (4, "crosscheck", truth(4)),
        (7, "crosscheck", truth(7)),
        (9, "crosscheck", "c9"),
    ]
    # Two of three (weights moved by the ±5% rule: a agreed most) and three ways apart.
    assert "models disagree: agreement 68%" in queued[0].reason
    assert "agreement 35%" in queued[2].reason
    inputs = CrosscheckStore(store).decision(run_id, 4)
    assert inputs is not None and inputs.inputs["fake:b"]["answer"] == "zz"
    assert inputs.inputs["fake:a"]["normalized"] == pytest.approx(0.9)
    events = AuditLog(store).events(AuditFilter(run_id=run_id))
    decided = [e for e in events if e.kind == "crosscheck.decided"]
    assert decided and decided[0].payload["decisions"] == {"adopt": 9, "review": 3}


def test_a_validation_set_weighs_the_models_by_f1_and_the_weighted_vote_decides(
    tmp_path: Path, engine: tuple[Store, Engine]
) -> None:
    store, eng = engine
    # On the validation rows (12 to 23) b is wrong on three in four and c on one in
    # four: weights about a 0.5, c 0.375, b 0.125. So a with c carry row 4 by a weighted
    # vote (88% agreement, under adopt's 90%), while a with b (63%) do not carry row 7.
    global WRONG
    saved = WRONG
    WRONG = {
        "fake:a": {9: "c9"},
        "fake:b": {4: "zz", 9: "zz", **{i: "zz" for i in range(12, 24) if i % 4}},
        "fake:c": {7: "zz", 9: "yy", **{i: "zz" for i in range(12, 24, 4)}},
    }
    try:
        validation = _dataset(tmp_path / "valid.csv", range(12, 24), expected=True)
        spec = _spec(_dataset(tmp_path / "rows.csv", range(ROWS)), validation=str(validation))
        run_id = eng.submit(spec)
        assert eng.wait(run_id, timeout=60).status == RunStatus.COMPLETED
        named = RunStore(store).newest_named("validate crosscheck: triage cross-check")
        assert named is not None
        validating = named.run_id
        assert eng.wait(validating, timeout=60).status == RunStatus.COMPLETED
    finally:
        WRONG = saved
    summary = CrosscheckStore(store).summary(run_id)
    assert summary is not None
    weights = {w.variant: w for w in summary.weights}
    assert weights["fake:a"].f1 == 1.0 > weights["fake:c"].f1 > weights["fake:b"].f1 > 0
    assert weights["fake:a"].validation_run_id == validating
    assert sum(w.weight for w in summary.weights) == pytest.approx(1.0)
    decisions = _decisions(store, run_id)
    assert (decisions[4], decisions[7], decisions[9]) == ("vote", "review", "review")
    assert {d for r, d in decisions.items() if r not in (4, 7, 9)} == {"adopt"}
    assert [i.row_index for i in ReviewStore(store).items("open", run_id)] == [7, 9]


def test_an_entropy_gap_over_the_threshold_flags_the_row_ambiguous() -> None:
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    check = CrossCheck(models=tuple(weights), field="label", entropy_gap=1.2)
    sure = {m: Answer("x", None, 0.2) for m in weights}
    assert decide(sure, weights, flat(a=1, b=1, c=1), check).decision == Decision.ADOPT
    split = {**sure, "c": Answer("x", None, 1.5)}  # all agree, but c was far less sure
    got = decide(split, weights, flat(a=1, b=1, c=1), check)
    assert (got.decision, got.ambiguous) == (Decision.REVIEW, True)
    assert got.entropy_gap == pytest.approx(1.3) and got.inputs["c"]["entropy"] == 1.5
    unchecked = CrossCheck(models=tuple(weights), field="label")  # no threshold: no flag
    assert decide(split, weights, flat(a=1, b=1, c=1), unchecked).decision == Decision.ADOPT


def test_a_crosscheck_with_an_entropy_gap_asks_for_log_probabilities_and_stores_them(
    tmp_path: Path, db_path: Path
) -> None:
    from promptlab.workbench import Workbench

    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(8)), encoding="utf-8")
    with Workbench.open() as wb:
        spec = wb.runs.spec_from_data(
            {
                "name": "entropy",
                "dataset": str(dataset),
                "variants": [
                    {
                        "messages": [{"role": "user", "content": "Say {{ text }}"}],
                        "params": {"max_tokens": 30},
                    }
                ],
                "crosscheck": {"models": ["sim:careful", "sim:sloppy"], "entropy_gap": 0.4},
            }
        )
        assert spec.top_logprobs == 5
        run_id = wb.runs.start(spec)
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
        with wb.store.read() as cur:
            stored = dict(
                cur.execute(
                    "SELECT variant || ':' || row_index, token_entropy FROM results "
                    "WHERE run_id = ?",
                    [run_id],
                ).fetchall()
            )
        store = wb.store
        flagged = []
        for row in range(8):
            d = CrosscheckStore(store).decision(run_id, row)
            assert d is not None
            careful, sloppy = stored[f"sim:careful:{row}"], stored[f"sim:sloppy:{row}"]
            assert careful is not None and sloppy is not None
            assert d.inputs["sim:careful"]["entropy"] == careful
            assert d.entropy_gap == pytest.approx(abs(sloppy - careful))
            assert d.ambiguous == (d.entropy_gap > 0.4)
            if d.ambiguous:
                assert d.decision == "review"
                flagged.append(row)
        assert flagged  # the sloppy model is far less sure of its tokens
        reasons = {i.row_index: i.reason for i in ReviewStore(store).items("open", run_id)}
        assert all(reasons[r].startswith("ambiguous: the models' token entropies") for r in flagged)
