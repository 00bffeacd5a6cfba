"""The Runs page's Items section, driven by AppTest: pick a run, pick an item, see it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown
from tests.item_run_helpers import BAD_ROW, ROWS, item_spec

PAGE = str(Path(__file__).resolve().parent.parent / "pages" / "runs.py")
TIMEOUT_S = 30


@pytest.fixture
def server() -> Iterator[RunningServer]:
    config = FakeLLMConfig(port=0, latency_ms=1, fail_rate=0.4, seed=3)
    with serve_in_thread(config) as running:
        yield running


def finished(tmp_path: Path, base_url: str, rows: int = ROWS) -> str:
    engine = get_workbench().engine
    run_id = engine.submit(item_spec(tmp_path, base_url, rows))
    assert engine.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


def items_table(at: AppTest) -> Any:
    return next(d for d in at.dataframe if (d.key or "").startswith("items_table_"))


def table_with(at: AppTest, column: str) -> Any:
    """The table with this column, or None (tables without selection carry no key)."""
    return next((d.value for d in at.dataframe if column in d.value.columns), None)


def pick(at: AppTest, row: int) -> AppTest:
    """Select a row of the items table, as a click on it does."""
    key = items_table(at).key
    at.session_state[key] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    return at.run()


def test_pick_an_item_and_see_its_messages_output_and_attempts(
    tmp_path: Path, server: RunningServer
) -> None:
    run_id = finished(tmp_path, server.openai_base_url)
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception
    assert at.selectbox(key="run_choice").value == run_id
    table = items_table(at).value
    assert len(table) == 2 * ROWS and list(table["row"][:4]) == [1, 1, 2, 2]
    # A briefed item that needed retries and then succeeded.
    index = next(
        i
        for i, (variant, attempts, status) in enumerate(
            zip(table["variant"], table["attempts"], table["status"], strict=True)
        )
        if variant == "briefed" and attempts > 1 and status == "succeeded"
    )
    key = table["key"][index]
    pick(at, index)
    assert not at.exception
    assert any(m.value == f"**Item** `{key}` · succeeded" for m in at.markdown)
    row_number = table["row"][index]
    texts = [c.value for c in at.code]
    assert "You are a terse assistant." in texts
    assert f"Summarize: ticket alpha-{row_number - 1:02d}" in texts
    inputs = table_with(at, "variable")
    assert dict(zip(inputs["variable"], inputs["value"], strict=True))["tone"] == "terse"
    params = [j.value for j in at.json]
    assert any(f'"max_tokens": {20 + row_number - 1}' in p.replace("\n", "") for p in params)
    metrics = {m.label: m.value for m in at.metric}
    assert int(metrics["Tokens out"]) > 0 and metrics["Latency"].endswith(" ms")
    attempts = table_with(at, "waited for")
    assert list(attempts["attempt"]) == list(range(1, len(attempts) + 1)) and len(attempts) > 1
    assert list(attempts["outcome"])[-1] == "ok" and set(attempts["outcome"][:-1]) == {"error"}
    assert set(attempts["waited for"][1:]) == {"backoff"} and all(attempts["wait ms"][1:] > 0)
    assert set(attempts["http"][:-1]) == {500}
    # The address bar now points at this item: a link to share.
    assert at.query_params["run"] == run_id and at.query_params["item"] == key
    # The next poll keeps the same item open.
    at.run()
    assert any(m.value == f"**Item** `{key}` · succeeded" for m in at.markdown)


def test_an_invalid_row_shows_the_error_instead_of_messages(
    tmp_path: Path, server: RunningServer
) -> None:
    run_id = finished(tmp_path, server.openai_base_url)
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    at.selectbox(key=f"items_kind_{run_id}").set_value("invalid_input").run()
    table = items_table(at).value
    assert list(table["row"]) == [BAD_ROW + 1, BAD_ROW + 1]
    pick(at, 0)
    assert not at.exception
    errors = [shown(e.value) for e in at.error]
    assert any(e.startswith("not sent: ") and "'text' is a required property" in e for e in errors)
    assert any(e.startswith("invalid_input: ") for e in errors)
    assert table_with(at, "waited for") is None


def test_a_deep_link_opens_the_run_and_the_item(tmp_path: Path, server: RunningServer) -> None:
    run_id = finished(tmp_path, server.openai_base_url)
    key = get_workbench().runs.items(run_id, offset=5, limit=1).rows[0].key
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = run_id
    at.query_params["item"] = key[:10]  # a prefix is enough
    at.run()
    assert not at.exception
    assert at.selectbox(key="run_choice").value == run_id
    assert any(m.value.startswith(f"**Item** `{key}` · ") for m in at.markdown)
    assert table_with(at, "waited for") is not None


def test_a_deep_link_to_an_unknown_item_says_so(tmp_path: Path, server: RunningServer) -> None:
    run_id = finished(tmp_path, server.openai_base_url, rows=2)
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = run_id
    at.query_params["item"] = "0" * 32
    at.run()
    assert not at.exception
    assert any(f"run {run_id} has no item" in shown(e.value) for e in at.error)


def test_items_page_through_a_run_longer_than_a_page(
    tmp_path: Path, fakellm: RunningServer
) -> None:
    run_id = finished(tmp_path, fakellm.openai_base_url, rows=30)  # 60 items, 50 a page
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert len(items_table(at).value) == 50
    assert any(c.value == "items 1-50 of 60" for c in at.caption)
    at.get("pagination")[0].set_value(2).run()
    assert not at.exception
    table = items_table(at).value
    assert list(table["row"]) == [r // 2 + 1 for r in range(50, 60)]
    pick(at, 0)
    assert any(m.value.startswith(f"**Item** `{table['key'][0]}`") for m in at.markdown)
    at.selectbox(key=f"items_variant_{run_id}").set_value("plain").run()
    table = items_table(at).value
    assert len(table) == 30 and set(table["variant"]) == {"plain"}
    assert not at.get("pagination")  # 30 items: one page


def test_rating_an_output_stores_feedback_that_the_metrics_count(
    tmp_path: Path, server: RunningServer
) -> None:
    run_id = finished(tmp_path, server.openai_base_url, rows=2)
    wb = get_workbench()
    key = wb.runs.items(run_id, status="succeeded", limit=1).rows[0].key
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = run_id
    at.query_params["item"] = key
    at.run()
    assert any(c.value == "no feedback yet" for c in at.caption)
    at.button(key=f"rate_thumbs_up_{key}").click().run()
    at.button(key=f"rate_thumbs_up_{key}").click().run()
    at.button(key=f"rate_click_{key}").click().run()
    assert not at.exception
    # A reviewer's click comes with its impression, so it counts in the CTR; "Good"
    # twice by the same person counts once.
    assert any(c.value == "click 1 · impression 1 · thumbs up 1" for c in at.caption)
    assert wb.analysis.result_feedback(run_id, key) == {"thumbs_up": 1, "click": 1, "impression": 1}
    variant = wb.runs.item(run_id, key).variant.name
    row = next(m for m in wb.analysis.metrics(run_id=run_id) if m.variant == variant)
    assert (row.thumbs_up, row.impressions, row.clicks) == (1, 1, 1)


def test_a_click_on_a_result_already_shown_adds_no_second_impression(
    tmp_path: Path, server: RunningServer
) -> None:
    run_id = finished(tmp_path, server.openai_base_url, rows=2)
    wb = get_workbench()
    key = wb.runs.items(run_id, status="succeeded", limit=1).rows[0].key
    (tmp_path / "fb.csv").write_text(f"result_id,kind\n{key},impression\n")
    wb.analysis.import_feedback(tmp_path / "fb.csv")
    wb.analysis.rate_result(run_id, key, "click")
    assert wb.analysis.result_feedback(run_id, key) == {"impression": 1, "click": 1}
    wb.analysis.rate_result(run_id, key, "click")  # that impression is used: the next brings one
    assert wb.analysis.result_feedback(run_id, key) == {"impression": 2, "click": 2}
