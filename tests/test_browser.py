"""The app's main journey in a real headless Chromium against `streamlit run app.py`."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from tests.fakellm_fixtures import ServerFactory

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed"),
]
ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 60
#: Bound for one step of a page (a view drawn, a click's answer): each waits on what the
#: page shows. Generous for a busy 2-core machine: a fresh app's first view took 26 to
#: 32 s under load 13 (two CPU-bound processes beside the suite), past the 30 s it had.
PAGE_STEP_MS = 120_000
#: The demo A/B: 40 rows of data/demo/tickets.csv, each sent to 2 variants once.
DEMO_ITEMS = 80


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def started_app(
    tmp_path: Path,
    *,
    port: int | None = None,
    args: Sequence[str] = (),
    address: str | None = "127.0.0.1",
    **extra_env: str,
) -> Iterator[str]:
    """`streamlit run app.py` on `port` (a free one by default) over tmp_path/app.duckdb,
    with `streamlit run` options `args`; yields its URL. It binds `address` (None: what
    the repository's .streamlit/config.toml says)."""
    port = port or free_port()
    bind = [] if address is None else ["--server.address", address]
    env = {
        **os.environ,
        "PROMPTLAB_DB": str(tmp_path / "app.duckdb"),
        "PROMPTLAB_AUTHOR": "e2e",
        **extra_env,
    }
    log = (tmp_path / "streamlit.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "app.py"),
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            *bind,
            "--browser.gatherUsageStats",
            "false",
            *args,
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError((tmp_path / "streamlit.log").read_text()) from None
                time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.fixture
def first_start_url(tmp_path: Path) -> Iterator[str]:
    """The app's first start on an empty database: it loads the demo and runs the demo
    experiment in the background (a few seconds of its CPU: only the test of that start
    pays them)."""
    with started_app(tmp_path) as url:
        yield url


@pytest.fixture
def demo_url(demo_db: Path, tmp_path: Path) -> Iterator[str]:
    """The app over a copy of the `init --demo` database: the demo prompts, datasets and
    experiment, and its finished run (tests/conftest.py builds it once per worker)."""
    shutil.copyfile(demo_db, tmp_path / "app.duckdb")
    with started_app(tmp_path) as url:
        yield url


@pytest.fixture
def app_url(tmp_path: Path) -> Iterator[str]:
    """The app over tmp_path/app.duckdb as the test's fixtures left it (`run_with_items`),
    with no demo loaded into it."""
    with started_app(tmp_path, PROMPTLAB_DEMO="0") as url:
        yield url


def after_a_redraw(tab: Page, pushed: list[int]) -> None:
    """Return once the server has pushed the tab a redraw since now (the Runs page's live
    panel: every second while a run goes, every 5 s otherwise); `pushed` grows by one per
    message the tab's websocket received."""
    seen = len(pushed)
    deadline = time.monotonic() + PAGE_STEP_MS / 1000
    # A redraw is several messages (its elements, then "script finished").
    while len(pushed) < seen + 2:
        assert time.monotonic() < deadline, "the live panel did not redraw"
        tab.wait_for_timeout(50)  # lets Playwright deliver the page's events


def is_loopback_url(url: str) -> bool:
    """Whether fetching `url` stays on this machine (data: and blob: fetch nothing)."""
    parts = urlsplit(url)
    if parts.scheme in {"data", "blob", "about"}:
        return True
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: What each browser context's pages fetched off loopback (the `page` fixture fills it).
_OUTSIDE: dict[int, list[str]] = {}


def outside_requests(page: Page) -> list[str]:
    """Every request the pages of `page`'s browser context made off loopback so far."""
    return _OUTSIDE[id(page.context)]


def _not_the_app(request: pytest.FixtureRequest) -> list[str]:
    """Addresses of a test's own pages that are not the app's (a mock sign-in provider),
    from the test module's `not_the_app` fixture if it has one: what they fetch is not
    checked."""
    try:
        return list(request.getfixturevalue("not_the_app"))
    except pytest.FixtureLookupError:
        return []


@pytest.fixture
def page(request: pytest.FixtureRequest) -> Iterator[Page]:
    """A Chromium tab; the test fails if any page of it fetched anything off loopback
    (a favicon, a font, a script from a CDN): the app works without the Internet."""
    from playwright.sync_api import Request, sync_playwright

    not_the_app = _not_the_app(request)
    outside: list[str] = []

    def note(url: str, sent: Request | None = None) -> None:
        if is_loopback_url(url):
            return
        try:
            document = sent.frame.url if sent is not None else ""
        except Exception:  # a request of no frame (a service worker's): counted
            document = ""
        if not any(document.startswith(prefix) for prefix in not_the_app):
            outside.append(url)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                # Loopback only: no host name resolves (a page's CDN stylesheet, say).
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            ],
        )
        # A proxy's test serves TLS with a certificate it made: the browser takes it.
        self_signed = request.node.get_closest_marker("self_signed") is not None
        context = browser.new_context(
            viewport={"width": 1400, "height": 1000}, ignore_https_errors=self_signed
        )
        context.set_default_timeout(PAGE_STEP_MS)  # clicks and reads wait as long as a step
        _OUTSIDE[id(context)] = outside
        # Every tab of the context (links open new ones): its requests and websockets.
        context.on("request", lambda sent: note(sent.url, sent))
        context.on("page", lambda tab: tab.on("websocket", lambda ws: note(ws.url)))
        try:
            yield context.new_page()
        finally:
            browser.close()
            _OUTSIDE.pop(id(context), None)
    assert not outside, f"pages fetched from outside: {sorted(set(outside))}"


def test_create_a_new_version_and_see_it_in_history(
    demo_url: str, page: Page, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(demo_url)
    # The first page is Compare, the demo run having results: go to Prompts as a user
    # does, by its link, once there (the sidebar is drawn on `/` before it switches to
    # Compare, and a click in between can lose to that switch).
    expect(page.get_by_role("heading", name="Compare")).to_be_visible(timeout=PAGE_STEP_MS)
    page.get_by_role("link", name="Prompts").click(timeout=PAGE_STEP_MS)
    expect(page.get_by_role("heading", name="Prompts")).to_be_visible(timeout=PAGE_STEP_MS)
    # The demo prompts are there. The description is a cell of the prompts table, drawn
    # on a canvas: its accessible grid holds the text, which Chromium once counted as
    # hidden under load (4 workers on 2 cores), so the check is that the cell is there,
    # not how it is painted.
    expect(page.get_by_text("Summarize an article into a short digest entry").first).to_be_attached(
        timeout=PAGE_STEP_MS
    )
    page.screenshot(path=str(tmp_path / "01-prompts.png"), full_page=True)

    page.get_by_role("tab", name="Edit").click()
    message = page.get_by_label("Message 2 (user)")
    expect(message).to_have_value(re.compile(r"\{\{ article \}\}"), timeout=PAGE_STEP_MS)
    message.fill(message.input_value() + "\nAnswer in English.")
    page.get_by_label("Commit message").fill("Ask for English answers")
    page.get_by_role("button", name="Save new version").click()
    expect(page.get_by_text("Saved article-summarizer@2.1.0")).to_be_visible(timeout=PAGE_STEP_MS)

    page.get_by_role("tab", name="History").click()
    # Dataframes draw on a canvas; their accessible grid holds the cell text, one row
    # per version: the new one carries its version, commit message and author.
    new_row = page.locator("tr[role='row']", has_text="Ask for English answers")
    expect(new_row).to_have_count(1, timeout=PAGE_STEP_MS)
    expect(new_row).to_contain_text("2.1.0")
    expect(new_row).to_contain_text("e2e")
    page.screenshot(path=str(tmp_path / "02-history.png"), full_page=True)

    page.get_by_role("tab", name="Compare").click()
    added_line = page.locator("code", has_text="+Answer in English.")
    expect(added_line.first).to_be_visible(timeout=PAGE_STEP_MS)
    page.screenshot(path=str(tmp_path / "03-compare.png"), full_page=True)

    # The preview renders the new version with the sample inputs, text shown verbatim.
    page.get_by_role("tab", name="Preview").click()
    rendered = page.locator("code", has_text="Answer in English.").filter(has_text="Sample article")
    expect(rendered.first).to_be_visible(timeout=PAGE_STEP_MS)

    # An error is shown as plain text: `__class__` is not turned into a bold "class".
    page.get_by_role("tab", name="Edit").click()
    page.get_by_label("Message 2 (user)").fill("{{ title.__class__ }}")
    page.get_by_role("button", name="Save new version").click()
    error = page.locator("[data-testid='stAlertContentError']")
    expect(error).to_contain_text("attribute '__class__' is not allowed", timeout=PAGE_STEP_MS)
    expect(error.locator("strong")).to_have_count(0)


def test_deep_link_to_runs_on_a_fresh_server_then_run_the_demo_ab(
    demo_url: str, page: Page, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{demo_url}/runs")  # the first request of this server process
    expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=PAGE_STEP_MS)
    # Inside the app shell: titled navigation, not a bare pages/ listing.
    expect(page.get_by_role("link", name="Prompts")).to_be_visible(timeout=PAGE_STEP_MS)
    # The fresh app's demo run redraws this page until it ends, and a click that lands
    # in a redraw can be lost (it was once on a busy machine): ours starts after it.
    demo_run = page.get_by_role("heading", name=re.compile(r"^demo: .* · "))
    expect(demo_run).to_contain_text("· completed", timeout=120_000)
    page.wait_for_function(
        "document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'",
        timeout=PAGE_STEP_MS,
    )
    page.get_by_text("Start a run from a YAML spec").click()
    start = page.get_by_role("button", name="Start run")
    expect(start).to_be_visible(timeout=PAGE_STEP_MS)
    start.click()
    expect(page.get_by_text("Started run_")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(
        page.get_by_role("heading", name="triage-production-vs-staging · completed")
    ).to_be_visible(timeout=120_000)
    # 40 tickets x 2 variants: every item done, none left queued or in flight.
    expect(page.get_by_text("80 of 80 items")).to_be_visible(timeout=PAGE_STEP_MS)
    # The live panel redraws every second: a read may catch metrics of two renders, so
    # read until they settle (or give up and show what was read).
    deadline = time.monotonic() + 30
    while True:
        counts = {
            label: metric(page, label) for label in ("Queued", "In flight", "Succeeded", "Failed")
        }
        if counts["Queued"] == counts["In flight"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert counts["Queued"] == counts["In flight"] == 0, counts
    assert counts["Succeeded"] + counts["Failed"] == DEMO_ITEMS, counts
    assert counts["Succeeded"] > 0, counts
    page.screenshot(path=str(tmp_path / "04-runs.png"), full_page=True)


def metric(page: Page, label: str) -> int:
    """The integer an st.metric with this label shows."""
    box = page.locator("[data-testid='stMetric']").filter(
        has=page.locator("[data-testid='stMetricLabel']", has_text=re.compile(f"^{label}$"))
    )
    return int(box.locator("[data-testid='stMetricValue']").inner_text().strip())


@pytest.fixture
def run_with_items(tmp_path: Path) -> tuple[str, str]:
    """A finished sim run in the database the app will open: (run id, one item's key)."""
    from promptlab.config import Settings
    from promptlab.engine import parse_spec
    from promptlab.workbench import Workbench

    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\nfirst row\nsecond row\n")
    spec = parse_spec(
        {
            "name": "linked",
            "dataset": str(dataset),
            "variants": [
                {
                    "messages": [{"role": "user", "content": "Say {{ text }}"}],
                    "model": "sim:fast",
                    "params": {"max_tokens": 16},
                }
            ],
        }
    )
    settings = Settings.from_env().with_db(tmp_path / "app.duckdb")
    with Workbench.open(settings) as wb:
        run_id = wb.runs.start(spec)
        assert wb.runs.wait(run_id, timeout=60).status == "completed"
        key = wb.runs.items(run_id, offset=1, limit=1).rows[0].key
        wb.review.add(run_id, [0, 1], reason="check the wording")  # for the Review page
    return run_id, key


def test_create_an_experiment_in_the_form_launch_it_and_follow_it(
    demo_url: str, page: Page, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{demo_url}/experiments")
    expect(page.get_by_role("heading", name="Experiments")).to_be_visible(timeout=PAGE_STEP_MS)
    # The demo brought its experiment (and ran it: see the Runs page).
    expect(page.get_by_text("staging weight")).to_be_visible(timeout=PAGE_STEP_MS)
    page.get_by_text("New experiment").click()
    form = page.get_by_test_id("stForm").first
    # The experiment's name, then each variant's: filled only once the whole form is
    # drawn (a fill while it was still drawn once landed in variant 2's box).
    names = form.get_by_role("textbox", name="Name", exact=True)
    expect(form.get_by_role("button", name="Create experiment")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(names).to_have_count(3, timeout=PAGE_STEP_MS)
    names.nth(0).fill("triage-70-30")
    form.get_by_role("textbox", name="Unit column").fill("customer_id")
    selects = form.get_by_test_id("stSelectbox")  # mode, then each variant's version
    for index, version in ((1, "ticket-triage@1.0.0"), (2, "ticket-triage@1.1.0")):
        combo = selects.nth(index).get_by_role("combobox")
        # Enter picks the first option shown, which can still be another version when
        # it comes before typing has filtered the list: check, and pick again if so.
        for _ in range(3):
            combo.click()
            combo.fill(version)
            page.wait_for_timeout(200)
            combo.press("Enter")
            if combo.input_value().startswith(version):
                break
        expect(combo).to_have_value(re.compile(rf"^{re.escape(version)}\b"))
    weights = form.get_by_role("spinbutton", name="Weight")
    weights.nth(0).fill("70")
    weights.nth(1).fill("30")
    # Each name box holds its own name before submitting (fill again if one was lost).
    for index, wanted in enumerate(("triage-70-30", "control", "variant-1")):
        for _ in range(3):
            if names.nth(index).input_value() == wanted:
                break
            names.nth(index).fill(wanted)
            page.wait_for_timeout(200)
        expect(names.nth(index)).to_have_value(wanted)
    form.get_by_role("button", name="Create experiment").click()
    expect(page.get_by_text("Created triage-70-30")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(page.get_by_text("variant-1 weight")).to_be_visible(timeout=PAGE_STEP_MS)  # it is chosen
    # Launch on the demo's customers, split by customer: the estimate comes first.
    expect(page.get_by_text("Requests", exact=True)).to_be_visible(timeout=PAGE_STEP_MS)
    assert metric(page, "Requests") == 800
    # 400 customers fit a 70/30 split: no warning, and Start is drawn below the estimate.
    expect(page.get_by_role("button", name="Start")).to_be_visible(timeout=PAGE_STEP_MS)
    assert not page.get_by_text(re.compile("Too few units")).count()
    page.screenshot(path=str(tmp_path / "06-experiment-estimate.png"), full_page=True)
    closed = page.get_by_text(re.compile(r"items closed"))
    for _ in range(3):  # a click landing on a rerun in progress is dropped by the browser
        page.get_by_role("button", name="Start").click()
        try:
            expect(closed).to_be_visible(timeout=20_000)
            break
        except AssertionError:
            continue
    expect(page.get_by_text(re.compile(r"completed: 800 of 800 items closed"))).to_be_visible(
        timeout=120_000
    )
    page.screenshot(path=str(tmp_path / "07-experiment-run.png"), full_page=True)
    # From the run, open it in Runs and open one of its items.
    link = page.get_by_role("link", name=re.compile(r"^Open run_\w+ in Runs$"))
    with page.context.expect_page() as opened:  # Markdown links open a new tab
        link.click()
    page = opened.value
    heading = page.get_by_role("heading", name=re.compile(r"triage-70-30 .* · completed"))
    expect(heading).to_be_visible(timeout=PAGE_STEP_MS)
    expect(page.get_by_text("800 of 800 items closed")).to_be_visible(timeout=PAGE_STEP_MS)
    page.screenshot(path=str(tmp_path / "08-experiment-in-runs.png"), full_page=True)


#: The Compare page's figures for a run of two variants: forest, rates, latency
#: percentiles, latency ECDF and metrics over time.
COMPARE_CHARTS = 5
#: The demo split run: 400 customers' 800 tickets, each sent to one variant.
DEMO_SPLIT_RESULTS = 800


def test_compare_is_the_first_page_once_the_demo_run_has_results(
    first_start_url: str, page: Page, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    run_choice = page.get_by_role("combobox", name="Run")
    finished = re.compile(rf"· {DEMO_SPLIT_RESULTS} results$")
    first_page = page.get_by_role("heading", name=re.compile(r"^(Prompts|Compare)$"))
    deadline = time.monotonic() + 200
    while True:  # the first start runs the demo experiment in the background
        page.goto(first_start_url)  # a new session each time: Compare once results exist
        # Wait for the session's first page, whichever it is, then look again if it is
        # not Compare yet, or Compare of a run still going (the page shows what was
        # stored when it ran: waiting on one session waited out the run).
        expect(first_page).to_be_visible(timeout=PAGE_STEP_MS)
        if first_page.inner_text() == "Compare":
            expect(run_choice).to_be_visible(timeout=PAGE_STEP_MS)
            if finished.search(run_choice.input_value()):
                break
        assert time.monotonic() < deadline, "the first page never became the finished run's Compare"
    expect(page.get_by_role("heading", name="Compare")).to_be_visible(timeout=PAGE_STEP_MS)
    # An address to share: Compare writes the run into it during its script run, so it
    # is waited for, not read once mid-run (a busy machine read it before the write).
    page.wait_for_url(re.compile(r"/compare\?(.*&)?run=run_"), timeout=PAGE_STEP_MS)
    assert "/compare" in page.url and "run=run_" in page.url
    # 400 customers: the split is judged, and the first look has a verdict (issue 40).
    expect(page.get_by_text("SRM check passed")).to_be_visible(timeout=PAGE_STEP_MS)
    expect(
        page.get_by_text(re.compile(r"staging against control: worse on latency p50"))
    ).to_be_visible(timeout=PAGE_STEP_MS)
    # The answer's tab alone: no figure until Charts is opened (Plotly's code is the
    # heaviest a first view could load).
    expect(page.get_by_role("tab", name="Answer")).to_have_attribute("aria-selected", "true")
    assert page.locator(".js-plotly-plot").count() == 0
    page.screenshot(path=str(tmp_path / "09-compare.png"), full_page=True)
    page.get_by_role("tab", name="Charts").click()
    assert_compare_charts(page)
    assert "tab=Charts" in page.url  # the open tab is part of the link to share
    page.screenshot(path=str(tmp_path / "09b-compare-charts.png"), full_page=True)
    # That link opens the same run on the same tab, in a new session.
    link = page.url
    page.goto("about:blank")
    page.goto(link)
    expect(run_choice).to_have_value(finished, timeout=PAGE_STEP_MS)
    assert_compare_charts(page)


def assert_compare_charts(page: Page) -> None:
    """The Compare page's Charts tab is open, and Plotly drew into each of its figures."""
    from playwright.sync_api import expect

    expect(page.get_by_role("tab", name="Charts")).to_have_attribute("aria-selected", "true")
    expect(page.locator(".js-plotly-plot")).to_have_count(COMPARE_CHARTS, timeout=PAGE_STEP_MS)
    # Bars, markers and lines are SVG paths.
    for chart in page.locator(".js-plotly-plot").all():
        expect(chart.locator("svg.main-svg").first).to_be_visible(timeout=PAGE_STEP_MS)
    assert page.locator(".js-plotly-plot path.point, .js-plotly-plot path.js-line").count() > 0


def test_with_the_app_open_a_cli_run_goes_through_it_and_shows_live(
    tmp_path: Path, page: Page, fakellm_factory: ServerFactory
) -> None:
    """`make run`'s setup: the app serves the API beside its pages, and the CLI, which
    could not open the database the app holds, runs through it; the run shows live."""
    from playwright.sync_api import expect

    from promptlab.server.discovery import find_server

    server = fakellm_factory()
    # Every request is held in flight until the test has seen the run live, then let
    # through: the run is running for as long as the checks take, however busy the machine.
    server.gate(0)
    dataset = tmp_path / "rows.csv"
    dataset.write_text("text\n" + "".join(f"row {i}\n" for i in range(20)))
    spec = tmp_path / "from-cli.yaml"
    spec.write_text(
        "name: from-cli\ndataset: rows.csv\nvariants:\n"
        "  - messages: [{role: user, content: 'Say {{ text }}'}]\n"
        "    model: fake:gpt-4o-mini\n    params: {max_tokens: 16}\n"
        f"endpoints: {{fake: {{kind: openai, base_url: '{server.openai_base_url}', "
        "concurrency: 2}}\n"
    )
    db = tmp_path / "app.duckdb"
    with started_app(tmp_path, PROMPTLAB_SERVE="127.0.0.1:0", PROMPTLAB_DEMO="0") as url:
        page.goto(f"{url}/runs")  # the first page view opens the database and serves
        expect(page.get_by_role("heading", name="Runs")).to_be_visible(timeout=PAGE_STEP_MS)
        deadline = time.monotonic() + 30
        while find_server(db) is None:
            assert time.monotonic() < deadline, "the app did not serve the API"
            time.sleep(0.1)
        env = {**os.environ, "PROMPTLAB_DB": str(db)}
        cli = subprocess.Popen(
            [sys.executable, "-m", "promptlab", "run", str(spec), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            info = find_server(db)
            assert info is not None
            request = urllib.request.Request(
                f"{info.url}/v1/runs", headers={"Authorization": f"Bearer {info.token}"}
            )
            while True:  # submitted through the API (the CLI's interpreter starts first)
                with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
                    if b"from-cli" in resp.read():
                        break
                assert time.monotonic() < deadline + 30 and cli.poll() is None, cli.stderr
                time.sleep(0.1)
            # While the CLI waits on it, the run is on the app's Runs page, running.
            page.reload()
            live = re.compile(r"^from-cli · (submitted|scheduled|running)$")
            expect(page.get_by_role("heading", name=live)).to_be_visible(timeout=PAGE_STEP_MS)
            status = subprocess.run(
                [sys.executable, "-m", "promptlab", "status"],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            assert status.returncode == 0 and "from-cli" in status.stdout, status.stderr
            assert server.stats()["successes"] == 0  # all held: it was live throughout
            server.gate(None)
            out, err = cli.communicate(timeout=120)
        finally:
            if cli.poll() is None:
                cli.kill()
        assert cli.returncode == 0, out + err
        assert "from-cli" not in err and ": completed" in out
        expect(page.get_by_role("heading", name="from-cli · completed")).to_be_visible(
            timeout=PAGE_STEP_MS
        )
        page.screenshot(path=str(tmp_path / "cli-run-in-app.png"), full_page=True)
