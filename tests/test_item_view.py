"""Opening a run's items: the read models and the facade, on real runs over fakellm."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from promptlab.engine.plan.planner import AllVariants, plan_items
from promptlab.errors import ItemKeyError, NotFoundError, PromptlabError, StoreError
from promptlab.fakellm.server import RunningServer
from promptlab.prompts.templates import Template
from promptlab.records import ItemStatus, PlannedChunk, PlannedItem, VariantRecord
from promptlab.store import ItemStore, ReadModels, RunStore, Store
from promptlab.workbench import Workbench
from tests.item_run_helpers import (
    BAD_ROW,
    ROWS,
    SYSTEM,
    USER,
    VARIANTS,
)


@pytest.fixture
def wb(finished_run: str) -> Iterator[Workbench]:
    with Workbench.open() as opened:
        yield opened


def test_the_items_list_pages_in_plan_order_with_the_total(
    wb: Workbench, finished_run: str
) -> None:
    page = wb.runs.items(finished_run)
    assert page.total == 2 * ROWS and len(page.rows) == 2 * ROWS
    assert [r.seq for r in page.rows] == list(range(2 * ROWS))
    assert [r.variant for r in page.rows[:4]] == [*VARIANTS, *VARIANTS]
    assert [r.row_index for r in page.rows[:4]] == [0, 0, 1, 1]
    later = wb.runs.items(finished_run, offset=30, limit=15)
    assert later.total == 2 * ROWS and [r.seq for r in later.rows] == list(range(30, 40))
    done = next(r for r in page.rows if r.status == ItemStatus.SUCCEEDED)
    assert done.output_preview and done.latency_ms and done.finished_at is not None
    assert len(done.output_preview) <= 120


def test_filters_narrow_the_list_and_the_count(wb: Workbench, finished_run: str) -> None:
    invalid = wb.runs.items(finished_run, error_kind="invalid_input")
    assert invalid.total == 2 and {r.row_index for r in invalid.rows} == {BAD_ROW}
    assert all(r.status == "failed" and r.attempts == 0 for r in invalid.rows)
    failed = wb.runs.items(finished_run, status="failed")
    assert {r.key for r in invalid.rows} <= {r.key for r in failed.rows}
    plain = wb.runs.items(finished_run, variant="plain", status="failed")
    assert [r.row_index for r in plain.rows if r.error_kind == "invalid_input"] == [BAD_ROW]
    assert all(r.variant == "plain" for r in plain.rows)
    assert wb.runs.items(finished_run, variant="nope").total == 0
    # Search: text of the dataset row (any case), or a key prefix.
    found = wb.runs.items(finished_run, search="ALPHA-07")
    assert found.total == 2 and {r.row_index for r in found.rows} == {7}
    key = found.rows[0].key
    assert [r.key for r in wb.runs.items(finished_run, search=key[:10]).rows] == [key]
    with pytest.raises(PromptlabError, match="unknown item status 'done'"):
        wb.runs.items(finished_run, status="done")
    with pytest.raises(StoreError, match="no run with id 'run_nope'"):
        wb.runs.items("run_nope")


def test_an_item_shows_the_messages_exactly_as_the_server_received_them(
    wb: Workbench, finished_run: str, retrying_server: RunningServer
) -> None:
    received = {r["headers"]["x-client-request-id"]: r["body"] for r in retrying_server.requests()}
    page = wb.runs.items(finished_run)
    sent = [r for r in page.rows if r.error_kind != "invalid_input"]
    assert sent and all(r.key in received for r in sent)
    for r in sent:
        view = wb.runs.item(finished_run, r.key)
        body = received[r.key]
        assert view.render_error is None
        assert [dict(m) for m in view.messages or ()] == body["messages"]
        assert view.params["max_tokens"] == body["max_tokens"]
        assert view.params.get("temperature") == body.get("temperature")
    briefed = wb.runs.item(finished_run, next(r.key for r in sent if r.variant == "briefed"))
    row = briefed.row
    assert briefed.messages == (
        {"role": "system", "content": SYSTEM.replace("{{ tone }}", row["tone"])},
        {"role": "user", "content": USER.replace("{{ text }}", row["text"])},
    )
    # params_from: max_tokens came from the row's `budget` column.
    assert briefed.params["max_tokens"] == row["budget"] != 16
    assert "columns" not in briefed.params


def test_a_retried_item_lists_every_attempt_with_its_wait_and_reason(
    wb: Workbench, finished_run: str
) -> None:
    retried = [r for r in wb.runs.items(finished_run).rows if r.attempts > 1]
    assert retried, "fail_rate 0.4 over 38 requests retried none"
    view = wb.runs.item(finished_run, retried[0].key)
    attempts = view.attempts
    assert [a.attempt for a in attempts] == list(range(1, len(attempts) + 1))
    assert len(attempts) == retried[0].attempts == (view.result.attempts if view.result else 0)
    for before, after in zip(attempts, attempts[1:], strict=False):
        assert before.outcome == "error" and before.error_kind == "server"
        assert before.http_status == 500 and before.error_message
        assert before.ended_at <= after.started_at
        assert after.wait_reason == "backoff" and after.wait_ms > 0
    last = attempts[-1]
    if view.status == ItemStatus.SUCCEEDED:
        assert last.outcome == "ok" and last.latency_ms is not None
        result = view.result
        assert result is not None and result.output_text and result.input_tokens
        assert result.finish_reason and result.model_version and view.error is None
    else:
        assert view.error == ("server", view.result.error_message if view.result else None)


def test_an_invalid_row_shows_the_render_error_it_failed_with(
    wb: Workbench, finished_run: str
) -> None:
    bad = wb.runs.items(finished_run, error_kind="invalid_input").rows[0]
    view = wb.runs.item(finished_run, bad.key)
    assert view.messages is None and view.attempts == []
    assert view.render_error is not None and "'text' is a required property" in view.render_error
    assert view.error is not None and view.error[0] == "invalid_input"
    assert view.render_error in view.error[1]  # the same words the item failed with
    assert view.row == {"tone": "terse", "budget": 20 + BAD_ROW}


def test_a_key_prefix_opens_the_item_and_bad_keys_say_why(wb: Workbench, finished_run: str) -> None:
    key = wb.runs.items(finished_run, limit=1).rows[0].key
    assert wb.runs.item(finished_run, key[:8].upper()).key == key
    with pytest.raises(NotFoundError, match=f"run {finished_run} has no item"):
        wb.runs.item(finished_run, "0" * 32)
    with pytest.raises(NotFoundError, match=f"run {finished_run} has no item whose key"):
        wb.runs.item(finished_run, "00000000")
    with pytest.raises(ItemKeyError, match="at least 8 of its hex digits"):
        wb.runs.item(finished_run, key[:7])
    with pytest.raises(ItemKeyError, match="at least 8 of its hex digits"):
        wb.runs.item(finished_run, "not-a-key-at-all")
    with pytest.raises(StoreError, match="no run with id 'run_nope'"):
        wb.runs.item("run_nope", key)


RUN = "run_planned"
TEMPLATE = Template.build([{"role": "user", "content": "Hi {{ name }}"}])
VARIANT = VariantRecord(
    0, "v", "hi@1.0.0", "sha256:v", "sim", "fast", {"max_tokens": 9}, TEMPLATE.canonical()
)


def test_a_pending_item_has_no_result_and_still_shows_its_messages(store: Store) -> None:
    RunStore(store).create_run(RUN, "planned", {}, [VARIANT])
    ItemStore(store).plan_items(RUN, plan_items(RUN, [{"name": "Ada"}], ["v"], AllVariants(1), 1))
    detail_key = ReadModels(store).items(RUN).rows[0].key
    view = Workbench(store).runs.item(RUN, detail_key)
    assert view.status == ItemStatus.PENDING and view.result is None and view.attempts == []
    assert view.messages == ({"role": "user", "content": "Hi Ada"},)
    assert view.params == {"max_tokens": 9} and view.output_json is None
    assert ReadModels(store).items(RUN).rows[0].output_preview is None


def test_an_ambiguous_prefix_is_refused_naming_the_candidates(store: Store) -> None:
    RunStore(store).create_run(RUN, "planned", {}, [VARIANT])
    keys = ["deadbeef" + "0" * 24, "deadbeef" + "1" * 24]
    items = [PlannedItem(k, i, i, 0, 0) for i, k in enumerate(keys)]
    rows = [{"name": "a"}, {"name": "b"}]
    ItemStore(store).plan_items(RUN, [PlannedChunk(0, rows, items)])
    wb = Workbench(store)
    with pytest.raises(ItemKeyError, match="'deadbeef' matches several items") as caught:
        wb.runs.item(RUN, "deadbeef")
    assert keys[0] in str(caught.value) and keys[1] in str(caught.value)
    assert wb.runs.item(RUN, "deadbeef1").row == {"name": "b"}


def test_output_that_is_json_is_parsed_for_display() -> None:
    from promptlab.records import FinalRow, ItemDetail
    from promptlab.views.item import ItemRequest, ItemView

    def view(text: str | None) -> ItemView:
        result = FinalRow(
            key="k",
            run_id=RUN,
            seq=0,
            row_index=0,
            variant="v",
            repeat=0,
            status="succeeded",
            prompt_version_id="sha256:v",
            endpoint="sim",
            model="fast",
            params={},
            attempts=1,
            finished_at=None,
            output_text=text,  # type: ignore[arg-type]
        )
        detail = ItemDetail(RUN, "k", 0, 0, 0, ItemStatus.SUCCEEDED, {}, VARIANT, result, [])
        return ItemView(detail, ItemRequest(None, {}, None))

    assert view(' {"a": [1, 2]}\n').output_json == {"a": [1, 2]}
    assert view("[1, 2").output_json is None
    assert view("plain words").output_json is None
    assert view("42").output_json is None  # a bare number is text, not a document
    assert json.dumps(view("[]").output_json) == "[]"


def test_a_key_in_a_dataset_row_is_masked_in_inputs_and_messages(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    RunStore(store).create_run(RUN, "planned", {}, [VARIANT])
    rows = [{"name": f"my key is {secret}", "extra": {"nested": [secret]}}]
    ItemStore(store).plan_items(RUN, plan_items(RUN, rows, ["v"], AllVariants(1), 1))
    key = ReadModels(store).items(RUN).rows[0].key
    view = Workbench(store).runs.item(RUN, key)
    assert view.messages == ({"role": "user", "content": "Hi my key is [redacted]"},)
    assert view.row == {"name": "my key is [redacted]", "extra": {"nested": ["[redacted]"]}}
