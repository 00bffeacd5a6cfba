"""Issue 22, item 7: downloads never fail silently.

The Runs page redraws its run every second. A download whose file is made on the click
(Streamlit's deferred `data` callable) gets a new id at each redraw and the old one is
dropped, so a click holding the old one got no file (`MediaFileStorageError: Deferred
file ... not found`), and a file that could not be made said so nowhere on the page.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import AppTest

from promptlab.engine import parse_spec_text
from promptlab.errors import ExportError
from promptlab.ui.resources import get_workbench
from tests.apptest_helpers import shown
from tests.test_browser import (  # noqa: F401 (fixtures)
    CHROMIUM,
    PAGE_STEP_MS,
    after_a_redraw,
    app_url,
    page,
    run_with_items,
)
from tests.test_page_runs import PAGE, TIMEOUT_S, spec_text, write_rows

COMPARE_PAGE = str(Path(PAGE).with_name("compare.py"))

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.fixture
def media(monkeypatch: pytest.MonkeyPatch) -> MediaFileManager:
    """One media file manager for every run of an AppTest, as a server has one: AppTest
    otherwise makes a new one per run, which would hide what a rerun drops."""
    import streamlit.testing.v1.app_test as app_test

    manager = MediaFileManager(MemoryMediaFileStorage("/mock/media"))
    monkeypatch.setattr(app_test, "MediaFileManager", lambda _storage: manager)
    return manager


@pytest.fixture
def run_id(tmp_path: Path) -> str:
    engine = get_workbench().engine
    run = engine.submit(parse_spec_text(spec_text(write_rows(tmp_path))))
    assert engine.wait(run, timeout=TIMEOUT_S).status == "completed"
    return run


def click_download(at: AppTest, key: str, media: MediaFileManager) -> Callable[[], bytes]:
    """Press the download (making its file first if the page asks for that) and return
    what the browser then fetches, as a call: it may be made after later reruns."""
    make = [b for b in at.button if b.key == f"{key}::make"]
    if make:
        make[0].click().run()
        assert not at.exception, at.exception
    offered = [b for b in at.get("download_button") if b.proto.id.endswith(f"{key}::download")]
    assert len(offered) == 1, "no file offered"
    proto = offered[0].proto
    if proto.deferred_file_id:  # made on the click, by id
        file_id = proto.deferred_file_id
        return lambda: _read(media, media.execute_deferred(file_id))
    url = proto.url
    return lambda: _read(media, url)


def _read(media: MediaFileManager, url: str) -> bytes:
    stored = media.read_file(url.rsplit("/", 1)[-1])
    assert stored is not None, f"no file at {url}"
    return stored.content


def test_the_file_offered_survives_the_pages_redraws(run_id: str, media: MediaFileManager) -> None:
    key = f"download_results_{run_id}"
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    at.selectbox(key=f"{key}::format").set_value("parquet").run()
    fetch = click_download(at, key, media)
    # The live panel redraws every second: the file must still be there afterwards,
    # and for a second click.
    at.run()
    at.run()
    assert fetch()[:4] == b"PAR1"
    assert fetch()[:4] == b"PAR1"
    assert not at.error


def test_a_file_that_cannot_be_made_says_why_on_the_page(
    run_id: str, media: MediaFileManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    wb = get_workbench()

    def broken(*args: object, **kwargs: object) -> bytes:
        raise ExportError("export: the disk is full")

    monkeypatch.setattr(wb.exports, "table_bytes", broken)
    key = f"download_results_{run_id}"
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    at.selectbox(key=f"{key}::format").set_value("parquet").run()
    with contextlib.suppress(AssertionError):  # no file: the page must say why
        click_download(at, key, media)()
    assert not at.exception, at.exception
    errors = [shown(e.value) for e in at.error]
    assert any(f"results-run-{run_id}.parquet" in e and "the disk is full" in e for e in errors), (
        errors
    )
    at.run()  # still said after the next redraw
    assert [shown(e.value) for e in at.error] == errors


def test_a_file_is_made_again_for_another_format(run_id: str, media: MediaFileManager) -> None:
    key = f"download_items_{run_id}"
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S).run()
    assert click_download(at, key, media)().decode().startswith("key,run_id,seq")
    at.selectbox(key=f"{key}::format").set_value("jsonl").run()
    assert click_download(at, key, media)().decode().startswith('{"key":')


#: Saved twice: the second across a redraw of the live panel (every 5 s for an ended run).
SAVES = 2


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_download_results_as_parquet_twice_in_a_browser(
    run_with_items: tuple[str, str],  # noqa: F811
    app_url: str,  # noqa: F811
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import WebSocket, expect

    # Every message the server pushes to the page: the live panel's redraws among them.
    pushed: list[int] = []

    def on_socket(socket: WebSocket) -> None:
        socket.on("framereceived", lambda _frame: pushed.append(1))

    page.on("websocket", on_socket)

    run, _ = run_with_items
    page.goto(f"{app_url}/runs?run={run}")
    make = page.get_by_role("button", name="Download results")
    expect(make).to_be_visible(timeout=PAGE_STEP_MS)
    # The row of the format picker and the button (the caption beside the button is
    # in a row of its own, inside it).
    picker = page.locator("[data-testid='stSelectbox']")
    row = page.locator("[data-testid='stHorizontalBlock']").filter(has=make).filter(has=picker).last
    combobox = row.get_by_role("combobox")
    deadline = time.monotonic() + PAGE_STEP_MS / 1000
    # The live panel redraws every second and may close the list: open it until the
    # choice is taken, however many redraws that takes.
    while combobox.input_value() != "Parquet":
        assert time.monotonic() < deadline, "Parquet could not be picked"
        row.locator("[data-testid='stSelectbox']").click()
        try:
            page.get_by_role("option", name="Parquet").click(timeout=5_000)
        except PlaywrightTimeoutError:
            page.keyboard.press("Escape")
    expect(combobox).to_have_value("Parquet", timeout=PAGE_STEP_MS)
    make.click()
    save = page.get_by_role("button", name=re.compile(r"^Save file \(\d"))
    expect(save).to_be_visible(timeout=PAGE_STEP_MS)
    for attempt in range(SAVES):
        if attempt:
            after_a_redraw(page, pushed)
        with page.expect_download(timeout=PAGE_STEP_MS) as download:
            save.click()
        saved = tmp_path / f"{attempt}.parquet"
        download.value.save_as(saved)
        assert download.value.suggested_filename == f"results-run-{run}.parquet"
        assert saved.read_bytes()[:4] == b"PAR1"
    page.screenshot(path=str(tmp_path / "downloads.png"), full_page=True)


def test_the_comparison_file_stays_offered_until_the_comparison_changes(
    demo_db_once: Path, db_path: Path, media: MediaFileManager
) -> None:
    shutil.copyfile(demo_db_once, db_path)
    (listed,) = get_workbench().runs.list()
    key = f"dl_cmp_{listed.run.run_id}"
    at = AppTest.from_file(COMPARE_PAGE, default_timeout=TIMEOUT_S).run()
    assert not at.exception, at.exception
    at.selectbox(key=f"{key}::format").set_value("jsonl").run()
    fetch = click_download(at, key, media)
    at.run()  # the same comparison drawn again: the same file, still offered
    assert [b for b in at.get("download_button") if b.key == f"{key}::download"]
    lines = fetch().decode().splitlines()
    assert lines and all(line.startswith("{") for line in lines)
