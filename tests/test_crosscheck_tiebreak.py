"""A third model on disagreement (`crosscheck.tiebreak`), end to end on scripted models of
known answers: two that disagree on known rows (and reason apart on one they agree on),
a third that is right on all of them. Exactly the rows past a threshold are re-inferred,
in the same run, and decided as the third model's answers say; a run stopped while its
re-inferences are sent resumes them without measuring or sending any row twice."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from promptlab.engine import Engine, parse_spec
from promptlab.engine.testing import ScriptedProvider
from promptlab.errors import ErrorKind, ProviderError, SpecError
from promptlab.evaluation.crosscheck import parse_crosscheck
from promptlab.evaluation.ended import run_ended
from promptlab.evaluation.tiebreak import TieBreak, chain_divergence, chain_text
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import EndpointConfig
from promptlab.providers.embeddings import hashed_embedding
from promptlab.records import RunStatus
from promptlab.store import Store
from promptlab.store.audit import AuditFilter, AuditLog
from promptlab.store.crosscheck import CrosscheckStore
from promptlab.store.review import ReviewStore
from promptlab.store.runs import RunStore

ENDPOINTS = {
    "fake": EndpointConfig("fake", "openai", rpm=60_000, context_windows={"m1": 4000}),
    "sim": EndpointConfig("sim", "sim"),
}
MODELS = ["fake:a", "fake:b"]
THIRD = "fake:t"
ROWS = 12
#: Where a or b is wrong (row -> its answer): rows 3, 5 and 8 split one against one.
WRONG = {"a": {3: "zz"}, "b": {5: "yy", 8: "zz"}, "t": {}}
#: Row 10: a and b agree, but b's reasoning shares no word with a's.
APART = {"b": {10: "purple elephants dance quietly beneath frozen lanterns tonight"}}


def truth(row: int) -> str:
    return f"c{row % 3}"


def scripted(request: CompletionRequest) -> str:
    row = int(request.messages[-1]["content"].split()[-1])
    label = WRONG[request.model].get(row, truth(row))
    reasoning = APART.get(request.model, {}).get(
        row, f"the ticket text says row {row} so the class follows from it"
    )
    return json.dumps({"label": label, "confidence": 0.9, "reasoning": reasoning})


def _dataset(path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text"])
        writer.writerows([f"row {i}"] for i in range(ROWS))
    return path


def _spec(dataset: Path, limits: Any = None, **tiebreak: Any) -> Any:
    return parse_spec(
        {
            "name": "triage tiebreak",
            **({"limits": limits} if limits else {}),
            "dataset": str(dataset),
            "variants": [
                {
                    "messages": [{"role": "user", "content": "Classify {{ text }}"}],
                    "params": {"max_tokens": 40},
                }
            ],
            "crosscheck": {
                "models": MODELS,
                "field": "label",
                "confidence": "confidence",
                "tiebreak": {"model": THIRD, "chain": "reasoning", **tiebreak},
            },
        }
    )


def _engine(store: Store, provider: ScriptedProvider) -> Engine:
    return Engine(
        store,
        endpoints=ENDPOINTS,
        provider_factory=lambda _cfg: provider,
        on_run_ended=run_ended,
    )


@pytest.fixture
def provider() -> ScriptedProvider:
    return ScriptedProvider(answer=scripted)


@pytest.fixture
def engine(db_path: Path, provider: ScriptedProvider) -> Iterator[tuple[Store, Engine]]:
    with Store(db_path) as store, _engine(store, provider) as eng:
        yield store, eng


def _third_rows(provider: ScriptedProvider, store: Store, run_id: str) -> list[int]:
    """The rows the third model answered, from the stored results."""
    with store.read() as cur:
        rows = cur.execute(
            "SELECT row_index FROM results WHERE run_id = ? AND variant = ? "
            "AND status = 'succeeded' ORDER BY 1",
            [run_id, THIRD],
        ).fetchall()
    return [r[0] for r in rows]


def _decisions(store: Store, run_id: str) -> dict[int, tuple[str, str]]:
    with store.read() as cur:
        rows = cur.execute(
            "SELECT row_index, decision, answer FROM crosscheck_decisions WHERE run_id = ?",
            [run_id],
        ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_exactly_the_doubted_rows_are_reinferred_and_decided_by_the_third_models_answer(
    tmp_path: Path, engine: tuple[Store, Engine], provider: ScriptedProvider
) -> None:
    store, eng = engine
    run_id = eng.submit(_spec(_dataset(tmp_path / "rows.csv")))
    assert eng.wait(run_id, timeout=60).status == RunStatus.COMPLETED
    # Split rows (agreement 50% < 65%) and the row reasoned apart (divergence > 35%).
    assert _third_rows(provider, store, run_id) == [3, 5, 8, 10]
    assert sum(n for key, n in provider.calls.items()) == 2 * ROWS + 4
    assert RunStore(store).get_run(run_id).total_items == 2 * ROWS + 4
    decisions = _decisions(store, run_id)
    # Two equal models and the third at weight 1: its side is 74-76% (a weighted vote).
    assert {r: decisions[r] for r in (3, 5, 8)} == {r: ("vote", truth(r)) for r in (3, 5, 8)}
    assert decisions[10] == ("adopt", truth(10))
    assert all(decisions[r] == ("adopt", truth(r)) for r in range(ROWS) if r not in (3, 5, 8))
    assert ReviewStore(store).items("open", run_id) == []
    crosschecks = CrosscheckStore(store)
    split, apart, calm = (crosschecks.decision(run_id, r) for r in (3, 10, 0))
    assert split is not None and split.reinferred and split.inputs[THIRD]["answer"] == truth(3)
    assert split.divergence == pytest.approx(0.0, abs=1e-9)
    assert apart is not None and apart.reinferred and apart.divergence > 0.35
    assert calm is not None and not calm.reinferred and THIRD not in calm.inputs
    summary = crosschecks.summary(run_id)
    assert summary is not None and summary.reinferred == 4
    assert {w.variant: w.weight for w in summary.weights}[THIRD] == 1.0
    events = AuditLog(store).events(AuditFilter(run_id=run_id))
    decided = [e for e in events if e.kind == "crosscheck.decided"]
    assert decided[0].payload["reinferred"] == 4


def test_each_threshold_alone_picks_its_own_rows(
    tmp_path: Path, engine: tuple[Store, Engine], provider: ScriptedProvider
) -> None:
    store, eng = engine
    dataset = _dataset(tmp_path / "rows.csv")
    only_agreement = eng.submit(_spec(dataset, when={"agreement_below": 0.65}))
    assert eng.wait(only_agreement, timeout=60).status == RunStatus.COMPLETED
    assert _third_rows(provider, store, only_agreement) == [3, 5, 8]
    only_chains = eng.submit(_spec(dataset, when={"chain_divergence_above": 0.35}))
    assert eng.wait(only_chains, timeout=60).status == RunStatus.COMPLETED
    assert _third_rows(provider, store, only_chains) == [10]
    # Without the third model's help the split rows stay split: they go to review.
    decisions = _decisions(store, only_chains)
    assert {r for r, (d, _a) in decisions.items() if d == "review"} == {3, 5, 8}


def test_a_run_stopped_while_reinferring_resumes_without_sending_a_row_twice(
    tmp_path: Path, db_path: Path, provider: ScriptedProvider
) -> None:
    refused = []

    def quota_once(request: CompletionRequest, _attempt: int) -> ProviderError | None:
        if request.model == "t" and not refused:  # the first re-inference stops the run
            refused.append(request.request_id)
            return ProviderError(ErrorKind.QUOTA, "quota exhausted", status=429, provider="fake")
        return None

    provider.fault = quota_once
    with Store(db_path) as store, _engine(store, provider) as eng:
        # One request at a time: the refused re-inference (row 3's) stops the run before
        # the other three are sent.
        one_by_one = {"fake": {"concurrency": 1}}
        run_id = eng.submit(_spec(_dataset(tmp_path / "rows.csv"), limits=one_by_one))
        stopped = eng.wait(run_id, timeout=60)
        assert stopped.status == RunStatus.FAILED and "quota" in (stopped.reason or "")
        assert _third_rows(provider, store, run_id) == []
        assert len(CrosscheckStore(store).measured_rows(run_id)) == ROWS
        eng.resume(run_id)
        assert eng.wait(run_id, timeout=60).status == RunStatus.COMPLETED
        assert _third_rows(provider, store, run_id) == [3, 5, 8, 10]
        with store.read() as cur:
            (measures,) = cur.execute(
                "SELECT count(*) FROM crosscheck_rounds WHERE run_id = ?", [run_id]
            ).fetchone()
        assert measures == ROWS
        # Every item answered once; only the refused one was sent twice (the resume
        # sends again what the stop failed).
        assert sum(provider.successes.values()) == 2 * ROWS + 4
        assert set(provider.successes.values()) == {1}
        assert provider.calls[refused[0]] == 2
        assert {r: _decisions(store, run_id)[r] for r in (3, 5)} == {
            3: ("vote", truth(3)),
            5: ("vote", truth(5)),
        }


def test_the_estimate_counts_the_third_model_for_every_row_and_says_so(
    tmp_path: Path, engine: tuple[Store, Engine]
) -> None:
    _store, eng = engine
    estimate = eng.estimate(_spec(_dataset(tmp_path / "rows.csv")))
    per_model = {v.name: v.requests for v in estimate.variants}
    assert per_model == {"fake:a": ROWS, "fake:b": ROWS, THIRD: ROWS}
    assert any("tiebreak: fake:t is counted for every row" in w for w in estimate.warnings)


def test_chain_divergence_is_the_furthest_pair_of_reasonings() -> None:
    same = chain_text('{"why": "the sky is blue"}', "why")
    assert same == "the sky is blue" and chain_text('{"x": 1}', "why") is None
    assert chain_text("no json here", "why") is None and chain_text("plain", None) == "plain"
    close = [hashed_embedding(t) for t in ("the sky is blue", "the sky is blue")]
    assert chain_divergence(close) == pytest.approx(0.0, abs=1e-9)
    far = [*close, hashed_embedding("quantum lemon orchestra")]
    assert chain_divergence(far) == pytest.approx(1.0, abs=0.3)
    assert chain_divergence(close[:1]) is None
    rule = TieBreak(THIRD, agreement_below=0.65, chain_divergence_above=None)
    assert rule.doubts(0.5, 0.9) and not rule.doubts(0.65, 0.9)


@pytest.mark.parametrize(
    ("tiebreak", "message"),
    [
        ({"model": "fake:a"}, "crosscheck.tiebreak.model: fake:a is already one of"),
        ({"model": "nocolon"}, "crosscheck.tiebreak.model:"),
        ({"model": THIRD, "weight": 0}, "crosscheck.tiebreak.weight: expected a number above 0"),
        ({"model": THIRD, "when": {}}, "crosscheck.tiebreak.when: expected"),
        ({"model": THIRD, "when": {"agreement_below": 2}}, "when.agreement_below: expected"),
        ({"model": THIRD, "chain": "a b"}, "crosscheck.tiebreak.chain: expected a JSON path"),
        ({"model": THIRD, "because": 1}, "crosscheck.tiebreak: unknown field(s) because"),
        ("fake:t", "crosscheck.tiebreak: expected {model: ENDPOINT:MODEL"),
    ],
)
def test_a_bad_tiebreak_is_refused_naming_the_field(tiebreak: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_crosscheck({"models": MODELS, "tiebreak": tiebreak})


def test_with_a_validation_set_only_the_checked_run_is_reinferred(
    tmp_path: Path, engine: tuple[Store, Engine], provider: ScriptedProvider
) -> None:
    store, eng = engine
    validation = tmp_path / "valid.csv"
    with validation.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(
            [["text", "label"], *([f"row {i}", truth(i)] for i in range(12, 18))]
        )
    spec = _spec(_dataset(tmp_path / "rows.csv"))
    raw = {**spec.raw, "expected": "label"}
    raw["crosscheck"] = {**raw["crosscheck"], "validation": str(validation)}
    run_id = eng.submit(parse_spec(raw))
    assert eng.wait(run_id, timeout=60).status == RunStatus.COMPLETED
    named = RunStore(store).newest_named("validate crosscheck: triage tiebreak")
    assert named is not None
    assert eng.wait(named.run_id, timeout=60).status == RunStatus.COMPLETED
    assert _third_rows(provider, store, run_id) == [3, 5, 8, 10]
    assert _third_rows(provider, store, named.run_id) == []  # it only weighs a and b
    decisions = _decisions(store, run_id)
    assert {r: decisions[r][1] for r in (3, 5, 8, 10)} == {r: truth(r) for r in (3, 5, 8, 10)}
