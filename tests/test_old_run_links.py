"""A link names a run however old it is: the pickers list the 50 newest runs, and the
one the address names besides them (issue 43: links that land)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec_text
from promptlab.records.runs import VariantRecord
from promptlab.store.result_runs import ResultRuns
from promptlab.store.runs import RunStore
from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown

RUNS_PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")
COMPARE_PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "compare.py")
TIMEOUT_S = 30
LISTED = 50


def finished_run(tmp_path: Path, name: str) -> str:
    dataset = tmp_path / f"{name}.csv"
    dataset.write_text("text\na\nb\n")
    spec = (
        f"name: {name}\ndataset: {dataset}\nvariants:\n"
        "  - messages: [{role: user, content: 'Say {{ text }}'}]\n"
        "    model: sim:fast\n    params: {max_tokens: 8}\n"
    )
    engine = get_workbench().engine
    run_id = engine.submit(parse_spec_text(spec))
    assert engine.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


def newer_runs(count: int) -> None:
    """`count` runs submitted after the others (recorded, never started)."""
    runs = RunStore(get_workbench().store)
    variant = VariantRecord(0, "only", "p@1", "pv", "sim", "fast", {}, {})
    for n in range(count):
        runs.create_run(f"run_newer_{n:03d}", f"newer-{n}", {}, [variant])


def opened_at(page: str, run_id: str) -> AppTest:
    """`page` opened at `?run=run_id`, run once without an exception."""
    at = AppTest.from_file(page, default_timeout=TIMEOUT_S)
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception
    return at


def test_a_link_opens_a_run_older_than_the_listed_ones(tmp_path: Path) -> None:
    old = finished_run(tmp_path, "old-one")
    newer_runs(LISTED)
    assert old not in {r.run.run_id for r in get_workbench().runs.list()}
    at = opened_at(RUNS_PAGE, old)
    assert at.selectbox(key="run_choice").value == old
    assert not any("not found" in shown(e.value) for e in at.error)


def test_runs_with_results_lists_a_named_older_run_beside_the_newest(tmp_path: Path) -> None:
    old, new = finished_run(tmp_path, "older"), finished_run(tmp_path, "newer")
    reads = ResultRuns(get_workbench().store)
    assert [r.run_id for r in reads.runs_with_results(limit=1)] == [new]
    assert [r.run_id for r in reads.runs_with_results(limit=1, include=old)] == [new, old]
    assert [r.run_id for r in reads.runs_with_results(limit=1, include="run_nope")] == [new]
    listed = get_workbench().runs.list(limit=1, include=old)
    assert [r.run.run_id for r in listed] == [new, old]


def test_a_compare_link_opens_a_run_older_than_the_listed_ones(tmp_path: Path) -> None:
    old = finished_run(tmp_path, "old-compared")
    newer_runs(LISTED)
    with get_workbench().store.transaction() as tx:  # each newer run: one result
        for n in range(LISTED):
            tx.execute(
                "INSERT INTO results SELECT * REPLACE (? AS run_id, "
                "idempotency_key || ? AS idempotency_key) FROM results WHERE run_id = ? "
                "LIMIT 1",
                [f"run_newer_{n:03d}", f"-{n}", old],
            )
    assert old not in {r.run_id for r in get_workbench().analysis.runs_with_results()}
    at = opened_at(COMPARE_PAGE, old)
    assert at.selectbox(key="compare_run").value == old
    assert not any("no results to compare" in shown(w.value) for w in at.warning)
