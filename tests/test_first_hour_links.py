"""Issue 43, item 1: every page's address opens what it names and keeps it across reruns,
also when the run named is not the newest and when the address changes within a session
(Back, a link followed in the same tab), where the pages once opened the newest run (or
the trace picked before) and rewrote the address to it. Driven by AppTest over two
finished runs, the older one named."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec
from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown

ROOT = Path(__file__).resolve().parent.parent
RUNS, COMPARE, AUDIT = (str(ROOT / "pages" / f"{name}.py") for name in ("runs", "compare", "audit"))
TIMEOUT_S = 30


def finished_run(tmp_path: Path, name: str) -> str:
    """Six rows through two variants of the simulated model, finished."""
    dataset = tmp_path / f"{name}.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(6)))
    variant = {"model": "sim:fast", "params": {"max_tokens": 16}}
    spec = parse_spec(
        {
            "name": name,
            "dataset": str(dataset),
            "variants": [
                {
                    "name": "terse",
                    "messages": [{"role": "user", "content": "Say {{ text }}"}],
                    **variant,
                },
                {
                    "name": "wordy",
                    "messages": [{"role": "user", "content": "Explain {{ text }}"}],
                    **variant,
                },
            ],
        }
    )
    wb = get_workbench()
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[str, str, str]:
    """(older run, newer run, the key of an item of the older one)."""
    older = finished_run(tmp_path, "older")
    newer = finished_run(tmp_path, "newer")
    key = get_workbench().runs.items(older, offset=3, limit=1).rows[0].key
    return older, newer, key


def address(at: AppTest) -> dict[str, str]:
    return {name: at.query_params[name] for name in at.query_params}


def opened_item(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("**Item** `")]


def test_runs_opens_the_run_and_item_named_and_keeps_them(two_runs: tuple[str, str, str]) -> None:
    older, newer, key = two_runs
    at = AppTest.from_file(RUNS, default_timeout=TIMEOUT_S).run()  # a session on the newest
    assert at.selectbox(key="run_choice").value == newer
    assert address(at) == {"run": newer}
    # The address changes within the session (Back, a link in the same tab).
    at.query_params["run"] = older
    at.query_params["item"] = key[:10]
    at.run()
    assert not at.exception
    assert at.selectbox(key="run_choice").value == older
    assert opened_item(at) == [f"**Item** `{key}` · succeeded"]
    assert address(at) == {"run": older, "item": key[:10]}
    # Reruns (a poll, a filter changed) keep the run, the item and the address.
    at.run()
    at.selectbox(key=f"items_status_{older}").set_value("succeeded").run()
    assert at.selectbox(key="run_choice").value == older
    assert opened_item(at) == [f"**Item** `{key}` · succeeded"]
    assert address(at) == {"run": older, "item": key[:10]}
    # The link to Compare names this run, not the newest.
    links = [m.value for m in at.markdown if "compare?run=" in m.value]
    assert links == [f":material/compare_arrows: [Compare its variants](compare?run={older})"]
    # Only a pick changes the address.
    at.selectbox(key="run_choice").set_value(newer).run()
    assert address(at) == {"run": newer} and not opened_item(at)


def test_runs_says_in_one_line_that_a_linked_run_is_not_found(
    two_runs: tuple[str, str, str],
) -> None:
    older, newer, _ = two_runs
    at = AppTest.from_file(RUNS, default_timeout=TIMEOUT_S)
    at.query_params["run"] = "run_000000000000"
    at.run()
    assert not at.exception
    assert [shown(e.value) for e in at.error] == ["run run_000000000000 not found"]
    assert at.selectbox(key="run_choice").value == newer
    at.run()  # the next poll: the address still names what the link said
    assert address(at) == {"run": "run_000000000000"} and len(at.error) == 1
    at.selectbox(key="run_choice").set_value(older).run()  # picked: the address follows
    assert address(at) == {"run": older} and not at.error


def test_compare_opens_the_run_named_and_keeps_it(two_runs: tuple[str, str, str]) -> None:
    older, newer, _ = two_runs
    at = AppTest.from_file(COMPARE, default_timeout=TIMEOUT_S).run()
    assert at.selectbox(key="compare_run").value == newer
    at.query_params["run"] = older  # a link followed within the session
    at.run()
    assert not at.exception
    assert at.selectbox(key="compare_run").value == older
    assert address(at) == {"run": older}
    at.number_input(key="compare_mde").set_value(2.0).run()  # a rerun by a widget
    assert at.selectbox(key="compare_run").value == older
    assert address(at) == {"run": older, "mde": "2"}  # the whole view is in the address
    at.selectbox(key="compare_run").set_value(newer).run()
    assert address(at) == {"run": newer, "mde": "2"}


def test_compare_says_in_one_line_that_a_linked_run_has_no_results(
    two_runs: tuple[str, str, str],
) -> None:
    at = AppTest.from_file(COMPARE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = "run_000000000000"
    at.run()
    assert not at.exception
    assert [shown(w.value) for w in at.warning] == [
        "Run run_000000000000 has no results to compare yet."
    ]
    at.run()
    assert address(at) == {"run": "run_000000000000"}


def test_audit_opens_the_trace_named_and_links_to_its_run_and_item(
    two_runs: tuple[str, str, str],
) -> None:
    older, newer, key = two_runs
    other = get_workbench().runs.items(newer, limit=1).rows[0].key
    at = AppTest.from_file(AUDIT, default_timeout=TIMEOUT_S)
    at.query_params["trace"] = key
    at.run()
    assert not at.exception
    link = f":material/play_circle: [Open the item in Runs](runs?run={older}&item={key})"
    assert link in [m.value for m in at.markdown]
    # Another trace picked (its address written), then Back to the first one's address.
    at.text_input(key="audit_trace_text").set_value(other).run()
    assert address(at) == {"trace": other}
    at.query_params["trace"] = key
    at.run()
    assert not at.exception
    assert f"Trace `{key}` · run `{older}`" in [m.value for m in at.markdown]
    assert address(at) == {"trace": key}
    at.run()  # and a rerun keeps it
    assert address(at) == {"trace": key} and link in [m.value for m in at.markdown]
