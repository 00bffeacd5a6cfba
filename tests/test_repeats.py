"""Repeats that mean something (issue 40, item 5): the simulated model varies across a
row's repeats at temperature > 0 and not at 0; per variant, the spread between repeats,
token consistency (exact, by field) and perplexity; the demo's sampling-strategy run."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from promptlab.analysis.repeats import (
    field_agreement,
    json_fields,
    pair_agreement,
    perplexity,
    variant_repeats,
)
from promptlab.cli import main
from promptlab.providers.base import CompletionRequest
from promptlab.providers.simulator import chosen_logprob, simulate
from promptlab.records.repeats import RepeatResult
from tests.conftest import closed_database, isolate
from tests.one_door_helpers import assert_same_both_ways

SPEC = Path(__file__).resolve().parent.parent / "data" / "demo" / "runs" / "sampling-strategy.yaml"
MESSAGES = (
    {"role": "system", "content": "You are a support triage assistant. Answer with JSON."},
    {"role": "user", "content": "Ticket:\nI was charged twice, please refund one payment."},
)
SCHEMA = {
    "type": "object",
    "required": ["category", "priority", "summary"],
    "properties": {
        "category": {"type": "string", "enum": ["billing", "bug", "account", "other"]},
        "priority": {"type": "string", "enum": ["low", "normal", "high", "urgent"]},
        "summary": {"type": "string", "maxLength": 200},
    },
}


def _request(temperature: float, top_p: float = 1.0, sample: int | None = 0) -> CompletionRequest:
    return CompletionRequest(
        model="sim:careful",
        messages=MESSAGES,
        temperature=temperature,
        top_p=top_p,
        output_schema=SCHEMA,
        sample=sample,
    )


def _texts(temperature: float, top_p: float = 1.0, repeats: int = 16) -> list[str]:
    return [simulate(_request(temperature, top_p, r), "sim:careful").text for r in range(repeats)]


def _agreement(texts: list[str]) -> float:
    """The mean over JSON fields of the share of repeat pairs agreeing on it."""
    shares = field_agreement([json_fields(t) for t in texts])
    return sum(shares.values()) / len(shares)


# ---- the simulated model ---------------------------------------------------------------


def test_at_temperature_0_every_repeat_gives_the_same_answer() -> None:
    assert len(set(_texts(0.0))) == 1
    logprobs = {chosen_logprob(_request(0.0, sample=r), "sim:careful", 40) for r in range(4)}
    assert logprobs == {(0.0, 40)}  # greedy: every chosen token had probability 1


def test_above_0_repeats_differ_the_same_way_every_time_and_more_when_hotter() -> None:
    warm, hot = _texts(0.8), _texts(1.2)
    assert len(set(warm)) > 1 and warm == _texts(0.8)  # deterministic per repeat
    assert _agreement(_texts(0.5)) > _agreement(warm) > _agreement(hot)
    # A narrower nucleus keeps fewer unlikely tokens: the repeats agree more.
    assert _agreement(_texts(0.8, 0.75)) > _agreement(warm)


def test_a_lone_request_is_answered_as_before_whatever_its_temperature() -> None:
    lone = _request(0.8, sample=None)
    assert simulate(lone, "sim:careful") == simulate(lone, "sim:careful")
    assert len({simulate(_request(0.8, sample=None), "sim:careful").text for _ in range(3)}) == 1


def test_log_probabilities_are_surer_at_lower_temperature() -> None:
    def mean_logprob(temperature: float, top_p: float = 1.0) -> float:
        found = [chosen_logprob(_request(temperature, top_p, r), "careful", 64) for r in range(8)]
        return sum(mean for mean, _ in found) / len(found)

    assert mean_logprob(0.5) > mean_logprob(0.8) > mean_logprob(1.2)
    assert mean_logprob(0.8, 0.75) > mean_logprob(0.8)


# ---- the statistics ------------------------------------------------------------------


def _result(row: int, repeat: int, text: str, **kw: object) -> RepeatResult:
    values: dict[str, object] = dict(
        succeeded=True, completed=True, output_text=text, latency_ms=100.0, output_tokens=10
    )
    values.update(kw)
    return RepeatResult(row_index=row, repeat=repeat, **values)  # type: ignore[arg-type]


def test_agreement_is_the_share_of_repeat_pairs_and_fields_are_compared_one_by_one() -> None:
    assert pair_agreement(["a", "a", "b"]) == pytest.approx(1 / 3)
    assert pair_agreement(["a"]) is None
    outputs = [json_fields('{"c": 1, "p": "x"}'), json_fields('{"c": 1}'), json_fields("oops")]
    assert field_agreement(outputs) == {"c": 1.0, "p": 0.0}
    assert json_fields("[1, 2]") is None


def test_a_variant_s_figures_follow_their_definitions() -> None:
    rows = [
        _result(0, 0, "x", latency_ms=100.0, logprob_mean=-0.5, logprob_tokens=10),
        _result(0, 1, "x", latency_ms=300.0, logprob_mean=-1.0, logprob_tokens=30),
        _result(1, 0, "y", output_tokens=4),
        _result(1, 1, "z", output_tokens=8, completed=False),
    ]
    stats = variant_repeats("v", rows)
    assert stats.exact_agreement == pytest.approx(0.5) and stats.rows_identical == 0.5
    assert stats.completion_agreement == pytest.approx(0.5)
    # Row 0: sd(100, 300) = 141.4; row 1: 0.
    assert stats.latency_spread_ms == pytest.approx(math.sqrt(2) * 100 / 2)
    assert stats.tokens_spread == pytest.approx(math.sqrt(8) / 2)
    assert stats.perplexity == pytest.approx(math.exp((0.5 * 10 + 1.0 * 30) / 40))
    assert stats.scored_tokens == 40
    assert perplexity([_result(0, 0, "x")]) == (None, 0)  # no log-probabilities: none


# ---- the demo's sampling-strategy run, end to end ----------------------------------


@pytest.fixture(scope="module")
def sampling_once(demo_db_once: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(database, run id): the demo's sampling-strategy spec run through the CLI on the
    demo database, the simulated model answering at once (latency_scale 0). Built once;
    tests copy it (`sampling_run`)."""
    folder = tmp_path_factory.mktemp("sampling-once")
    db = folder / "demo.duckdb"
    shutil.copyfile(demo_db_once, db)
    providers = folder / "providers.yaml"
    providers.write_text(
        yaml.safe_dump({"endpoints": {"sim": {"kind": "sim", "latency_scale": 0}}})
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        isolate(monkeypatch, db)
        monkeypatch.setenv("PROMPTLAB_PROVIDERS", str(providers))
        result = CliRunner().invoke(main, ["--db", str(db), "run", str(SPEC)])
    assert result.exit_code == 0, (result.output, result.exception)
    return closed_database(db), result.output.strip().splitlines()[-1].split()[-1]


@pytest.fixture
def sampling_run(
    sampling_once: tuple[Path, str], demo_db: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """This test's copy of the sampling-strategy run's database, at `demo_db`."""
    shutil.copyfile(sampling_once[0], demo_db)
    monkeypatch.setenv("PROMPTLAB_DB", str(demo_db))
    return sampling_once[1]


def _repeats_json(db: Path, run_id: str) -> dict[str, dict[str, Any]]:
    result = CliRunner().invoke(main, ["--db", str(db), "repeats", run_id, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["repeats"] == 4
    return {v["variant"]: v for v in data["variants"]}


def test_the_sampling_strategy_table_comes_out_of_the_run(sampling_run: str, demo_db: Path) -> None:
    found = _repeats_json(demo_db, sampling_run)
    assert list(found) == ["fixed", "linear-decay", "adaptive-top-p", "greedy"]
    greedy = found["greedy"]
    assert (greedy["exact_agreement"], greedy["rows_identical"], greedy["tokens_spread"]) == (
        1.0,
        1.0,
        0.0,
    )
    assert greedy["perplexity"] == pytest.approx(1.0)
    for name in ("fixed", "linear-decay", "adaptive-top-p"):
        v = found[name]
        assert v["rows"] == 40 and v["scored_tokens"] > 0
        assert v["exact_agreement"] < 1.0 and v["perplexity"] > 1.0
        # The label is read off the ticket: it holds better than the free-text summary.
        fields = v["field_agreement"]
        assert fields["category"] > fields["summary"]
    # The nucleus (top_p 0.75 to 0.95) cuts the unlikely tokens a fixed T = 0.8 keeps:
    # surer tokens, repeats that agree more.
    top_p, fixed = found["adaptive-top-p"], found["fixed"]
    assert top_p["perplexity"] < fixed["perplexity"]
    assert top_p["exact_agreement"] > fixed["exact_agreement"]
    # Linear decay averages T = 0.85 over the run, hotter than 0.8: less sure tokens.
    assert found["linear-decay"]["temperature_mean"] == pytest.approx(0.85)
    assert found["linear-decay"]["perplexity"] > fixed["perplexity"]


def test_perplexity_without_log_probabilities_is_a_dash(sampling_run: str, demo_db: Path) -> None:
    with duckdb.connect(str(demo_db)) as con:
        con.execute(
            "UPDATE results SET logprob_mean = NULL, logprob_tokens = NULL "
            "WHERE run_id = ? AND variant = 'fixed'",
            [sampling_run],
        )
    result = CliRunner().invoke(main, ["--db", str(demo_db), "repeats", sampling_run])
    assert result.exit_code == 0, result.output
    fixed = next(line for line in result.output.splitlines() if line.startswith("fixed "))
    assert fixed.split()[4] == "-"
    assert "by field" in result.output and "category" in result.output
    assert _repeats_json(demo_db, sampling_run)["fixed"]["perplexity"] is None


def test_repeats_prints_the_same_with_and_without_a_server(
    sampling_run: str, demo_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    called = assert_same_both_ways(
        demo_db,
        tmp_path,
        monkeypatch,
        reading=[["repeats", "{run}"], ["repeats", "{run}", "--json"], ["repeats", "run_nope"]],
        values={"run": sampling_run},
    )
    assert f"GET /v1/runs/{sampling_run}/repeats" in called


def _section(run_id: str) -> None:
    from promptlab.ui.repeats import repeats_section
    from promptlab.ui.resources import get_workbench

    repeats_section(get_workbench(), run_id)


def test_the_page_section_draws_the_table_and_the_bands(sampling_run: str) -> None:
    at = AppTest.from_function(_section, args=(sampling_run,), default_timeout=30).run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["variant"]) == ["fixed", "linear-decay", "adaptive-top-p", "greedy"]
    assert at.subheader[0].value.startswith("Repeats")
    at.radio[0].set_value("tokens").run()
    assert not at.exception


def test_a_run_without_repeats_draws_no_section(
    demo_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPTLAB_DB", str(demo_db))
    with duckdb.connect(str(demo_db)) as con:
        (run_id,) = con.execute("SELECT run_id FROM runs LIMIT 1").fetchone()  # type: ignore[misc]
    at = AppTest.from_function(_section, args=(run_id,), default_timeout=30).run()
    assert not at.exception and not at.subheader and not at.dataframe
