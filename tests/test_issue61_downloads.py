"""Issue 61, item 3: every download on a filtered page exports what the page shows.

Runs filtered to one variant showed "items 1-50 of 240" and "Download items" gave all
800. The file now holds the items the filtered list shows (every page of it), with a
caption beside the button naming the count and the filters; the run's every item is a
separate, named choice. The filters go down into the export's COPY (the library), so
`wb.exports` writes the same rows as `wb.runs.items` lists.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec, parse_spec_text
from promptlab.errors import ExportError
from promptlab.facades.audit import AuditFilter
from promptlab.records import ItemFilter
from promptlab.ui.resources import get_workbench
from promptlab.workbench import Workbench
from tests.apptest_helpers import shown
from tests.test_issue22_downloads import click_download, media  # noqa: F401 (fixture)
from tests.test_page_runs import PAGE, TIMEOUT_S, spec_text, write_rows

AUDIT_PAGE = str(Path(PAGE).with_name("audit.py"))
REVIEW_PAGE = str(Path(PAGE).with_name("review.py"))
#: Rows through each of two variants: more items per variant than one page (50) holds.
ROWS = 60


@pytest.fixture
def two_variant_run(tmp_path: Path) -> str:
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(ROWS)))
    variant = {"messages": [{"role": "user", "content": "Say {{ text }}"}], "model": "sim:fast"}
    spec = parse_spec(
        {
            "name": "two-variants",
            "dataset": str(dataset),
            "variants": [{"name": n, **variant, "params": {"max_tokens": 8}} for n in ("a", "b")],
        }
    )
    wb = get_workbench()
    run_id = wb.runs.start(spec)
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    return run_id


def csv_rows(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def captions(at: AppTest) -> list[str]:
    return [shown(c.value) for c in at.caption]


def test_a_filtered_runs_page_downloads_what_it_shows_and_says_so(
    two_variant_run: str,
    media: MediaFileManager,  # noqa: F811
) -> None:
    run_id = two_variant_run
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    at.selectbox(key=f"items_variant_{run_id}").set_value("b").run()
    assert not at.exception, at.exception
    said = captions(at)
    assert f"items 1-50 of {ROWS}" in said  # the list shows one page of the 60
    # The file: every page of the filtered list, and nothing else.
    items = csv_rows(click_download(at, f"download_items_{run_id}", media)())
    assert len(items) == ROWS and {r["variant"] for r in items} == {"b"}
    results = csv_rows(click_download(at, f"download_results_{run_id}", media)())
    assert len(results) == ROWS and {r["variant"] for r in results} == {"b"}
    # Beside each button: what its file holds.
    assert f"{ROWS} items: variant b" in said
    assert f"results of {ROWS} items: variant b" in said
    # The whole run is a separate choice, named as such.
    everything = at.button(key=f"download_all_items_{run_id}::make")
    assert everything.label == "Download all items"
    assert f"{2 * ROWS} items: whole run" in said
    every = csv_rows(click_download(at, f"download_all_items_{run_id}", media)())
    assert len(every) == 2 * ROWS and {r["variant"] for r in every} == {"a", "b"}
    assert not at.exception and not at.error
    # Unfiltered, the list is the whole run: one choice, saying so.
    at.selectbox(key=f"items_variant_{run_id}").set_value("all").run()
    assert f"{2 * ROWS} items: whole run" in captions(at)
    assert not [b for b in at.button if b.key == f"download_all_items_{run_id}::make"]


def test_the_file_name_and_the_audit_trail_say_which_items(two_variant_run: str) -> None:
    wb = get_workbench()
    kept = ItemFilter(variant="b", search="row 1")
    assert wb.exports.file_name("items", "csv", run_id=two_variant_run, items=kept) == (
        f"items-run-{two_variant_run}-variant-b-search-row_1.csv"
    )
    data = wb.exports.table_bytes("items", "csv", run_id=two_variant_run, items=kept)
    rows = csv_rows(data)
    # "row 1" and "row 10" to "row 19": 11 rows, through variant b only.
    assert len(rows) == 11 and {r["variant"] for r in rows} == {"b"}
    (recorded,) = wb.audit.events(AuditFilter(kind="table.exported"))
    assert recorded.payload["rows"] == 11
    assert recorded.payload["items"] == {"variant": "b", "search": "row 1"}


@pytest.mark.parametrize(
    "kept",
    [
        ItemFilter(status="failed"),
        ItemFilter(status="succeeded", variant="plain"),
        ItemFilter(error_kind="invalid_input"),
        ItemFilter(search="alpha-1"),
        ItemFilter(check="no_schema", variant="briefed"),
    ],
    ids=lambda f: f.describe(),
)
def test_every_table_of_a_filtered_export_holds_the_listed_items(
    finished_run: str, kept: ItemFilter
) -> None:
    with Workbench.open() as wb:
        listed = wb.runs.items(
            finished_run,
            status=kept.status,
            variant=kept.variant,
            error_kind=kept.error_kind,
            check=kept.check,
            search=kept.search,
            limit=1_000,
        )
        keys = {r.key for r in listed.rows}
        assert 0 < len(keys) == listed.total < 40  # a real subset of the run's 40 items

        def exported(table: str) -> list[dict[str, str]]:
            data = wb.exports.table_bytes(table, "jsonl", run_id=finished_run, items=kept)
            return [json.loads(line) for line in data.decode().splitlines()]

        items = exported("items")
        assert sorted(r["key"] for r in items) == sorted(keys)
        results = {r["idempotency_key"] for r in exported("results")}
        assert results == {r.key for r in listed.rows if r.finished_at is not None}
        attempts = {r["idempotency_key"] for r in exported("attempts")}
        assert attempts == {r.key for r in listed.rows if r.attempts}


def test_item_filters_need_one_run_and_an_item_table(finished_run: str) -> None:
    with Workbench.open() as wb:
        with pytest.raises(ExportError, match="give --run"):
            wb.exports.table_bytes("items", "csv", items=ItemFilter(variant="plain"))
        with pytest.raises(ExportError, match="metrics has no items"):
            wb.exports.table_bytes(
                "metrics", "csv", run_id=finished_run, items=ItemFilter(variant="plain")
            )


def test_the_audit_download_names_its_filters_beside_the_button(two_variant_run: str) -> None:
    at = AppTest.from_file(AUDIT_PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    assert any(c.endswith(" events: every event") for c in captions(at))
    at.selectbox(key="audit_run").set_value(two_variant_run).run()
    total = get_workbench().audit.count(AuditFilter(run_id=two_variant_run, limit=None))
    assert f"{total} events: run {two_variant_run}" in captions(at)


def settled_run(wb: Workbench, folder: Path, answer: str, rows: int) -> str:
    """A finished run on the sim model with `rows` of its rows settled on `answer`."""
    folder.mkdir()
    run_id = wb.runs.start(parse_spec_text(spec_text(write_rows(folder))))
    assert wb.runs.wait(run_id, timeout=TIMEOUT_S).status == "completed"
    for item_id in wb.review.add(run_id, list(range(rows))):
        wb.review.correct(item_id, answer)
    return run_id


def test_review_downloads_the_picked_run_s_answers_and_every_run_s_apart(
    tmp_path: Path,
    media: MediaFileManager,  # noqa: F811
) -> None:
    wb = get_workbench()
    picked = settled_run(wb, tmp_path / "a", "from a", rows=2)
    settled_run(wb, tmp_path / "b", "from b", rows=1)
    at = AppTest.from_file(REVIEW_PAGE, default_timeout=TIMEOUT_S)
    at.query_params["run"] = picked
    at.run()
    assert not at.exception, at.exception
    lines = click_download(at, "review_export", media)().decode().splitlines()
    assert [json.loads(line)["expected"] for line in lines] == ["from a", "from a"]
    assert f"2 settled answers: run {picked}" in captions(at)
    assert at.button(key="review_export_all::make").label.startswith(
        "Every run's settled answers as a dataset (3 rows)"
    )
    assert "3 settled answers: every run" in captions(at)
    every = click_download(at, "review_export_all", media)().decode().splitlines()
    assert sorted(json.loads(line)["expected"] for line in every) == ["from a"] * 2 + ["from b"]
