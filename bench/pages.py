"""How near each page of the app loads to Streamlit's floor, in headless Chromium.

    PYTHONPATH=. .venv/bin/python bench/pages.py --repeats 5
    git archive HEAD | tar -x -C /tmp/before     # then, a before/after in one run:
    PYTHONPATH=. .venv/bin/python bench/pages.py --before /tmp/before
    PYTHONPATH=. .venv/bin/python bench/pages.py --make-run --same-elements   # vs bare twins

Serves Streamlit apps the same way (`streamlit run`, the same flags, each from its project
folder so each reads the same .streamlit/config.toml, each on a free loopback port): the
floor, a one-line page (`st.write("hello")` in a temporary folder), and the app (`app.py`
over a fresh database in a temporary folder, which its first start fills with the demo,
as on a fresh clone); with `--before`, the app of another checkout beside it; with
`--make-run`, an app is started as `make run` starts it (`promptlab.ui.launch`: its
database opened and the demo started before the port opens). Then:

1. the first load of each server (its first browser visit after it started; an app's
   builds its demo database), against the floor's first load; then it waits until the
   app's demo run has completed and loads each page once (warm-up), an app at a time;
2. loads every page `--repeats` times, each in a new browser context (a fresh
   session, an empty HTTP cache), the floor's page among them in each round, and
   prints each page's median, the floor's median and the ratio.

Two times are taken per load, both on the page's own clock (performance.now(), from
the start of the navigation) at the first animation frame where they hold:

- `content`: the main area shows a real element (a heading, text, a metric, a table,
  an alert or a chart with a non-zero size) and no skeleton is left in the document
  (`stSkeleton`, `stSkeletonElement`, `stAppSkeleton`);
- `done`: `content`, and the script run is over (`stApp`'s data-test-script-state is
  `notRunning`) with no stale element left (what the run has not redrawn yet).

The ratios are of `done`. `/` is the address a visitor opens first: it goes on to
Compare (or Prompts, before any run has results), two script runs. Each context is
closed after its load, so no session of an earlier load keeps polling. Not a test: it
asserts nothing.

With `--same-elements`, each page also has a bare twin (bench/page_twins.py): after
the warm-up, each page of the app is loaded once more and what its server sent is
recorded; a Streamlit server with no promptlab code (bench/page_twin_app.py, served like
the floor) draws the same elements with the same data at the same addresses. The twin
is measured in the same rounds, page by page beside the app's, and the report gives
each page's app/twin ratio: promptlab's own overhead. The browser resolves no host
name but loopback (`--host-resolver-rules`), and a recorded load fails if the page
asked for anything else.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
#: No host name resolves but loopback's: a page that asks for another host fails to.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
#: The app's addresses: `/` (goes on to Compare or Prompts), then every page.
PAGES = ("/", "/compare", "/prompts", "/runs", "/datasets", "/experiments", "/review", "/audit")
FLOOR_SCRIPT = 'import streamlit as st\n\nst.write("hello")\n'
#: `--elements`: one-element pages served like the floor, what each kind of element costs
#: a page by itself (its script is instant; the browser loads and runs its code).
ELEMENT_SCRIPTS = {
    "dataframe": "st.dataframe(pd.DataFrame({'a': range(10), 'b': list('abcdefghij')}))",
    "plotly": "st.plotly_chart(go.Figure(go.Bar(x=[1, 2], y=[3, 4])))",
    "code": "st.code('x = 1', language=None)",
    "vega-lite": "st.bar_chart(pd.DataFrame({'a': [1, 2, 3]}))",
    "table": "st.table(pd.DataFrame({'a': range(10), 'b': list('abcdefghij')}))",
    "six metrics": "for i, c in enumerate(st.columns(6)):\n    c.metric(f'm{i}', i)",
    "selectbox": "st.selectbox('Run', ['a', 'b'])",
    "dataframe+plotly": "st.dataframe(pd.DataFrame({'a': range(10)}))\n"
    "st.plotly_chart(go.Figure(go.Bar(x=[1, 2], y=[3, 4])))",
}
#: The app's shell (app.py's seven pages with Material icons in the
#: sidebar, a caption under them) around a page of one element: what any page of the
#: app costs before its own content.
SHELL_SCRIPT = """
def page():
    {body}

TITLES = ("Compare", "Prompts", "Runs", "Datasets", "Experiments", "Review", "Audit")
navigation = st.navigation(
    [st.Page(page, title=t, icon=":material/table:", url_path=t.lower()) for t in TITLES]
)
with st.sidebar:
    st.caption("Database: `app.duckdb`")
navigation.run()
"""
ELEMENT_SCRIPTS |= {
    "shell": SHELL_SCRIPT.format(body="st.write('hello')"),
    "shell+dataframe": SHELL_SCRIPT.format(body=ELEMENT_SCRIPTS["dataframe"]),
}
ELEMENT_HEADER = (
    "import pandas as pd\nimport plotly.graph_objects as go\nimport streamlit as st\n\n"
    'st.title("one element")\n'
)
STARTUP_TIMEOUT_S = 120.0
#: How long one load may take before the bench gives up on it (a busy machine).
LOAD_TIMEOUT_MS = 120_000
#: The demo run (80 items on the simulated model) must complete before the timed loads.
DEMO_TIMEOUT_MS = 180_000
#: Each load's times, read on the page's own clock at the first frame they hold.
MEASURE_JS = """
() => {
  const app = document.querySelector('[data-testid="stApp"]');
  const main = document.querySelector('[data-testid="stMain"]');
  if (!app || !main) return false;
  const real = main.querySelectorAll(
    '[data-testid="stHeading"], [data-testid="stMarkdown"], [data-testid="stMetric"], ' +
    '[data-testid="stDataFrame"], [data-testid="stTable"], [data-testid="stAlert"], ' +
    '[data-testid="stPlotlyChart"], [data-testid="stText"], [data-testid="stCode"]');
  let shown = false;
  for (const el of real) {
    const box = el.getBoundingClientRect();
    if (box.width > 0 && box.height > 0) { shown = true; break; }
  }
  const skeleton = document.querySelector(
    '[data-testid="stSkeleton"], [data-testid="stSkeletonElement"], ' +
    '[data-testid="stAppSkeleton"]');
  if (!shown || skeleton) return false;
  const now = performance.now();
  if (window.__plContent === undefined) window.__plContent = now;
  if (app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (main.querySelector('[data-stale="true"]')) return false;
  return {content: window.__plContent, done: now};
}
"""


@dataclass(frozen=True)
class Load:
    """One load's times in seconds from the start of its navigation."""

    content: float
    done: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def served(
    script: Path, env: dict[str, str], log: Path, root: Path = ROOT, command: str = "streamlit"
) -> Iterator[str]:
    """`streamlit run script` from the project folder `root` on a free loopback port
    (`command` is the module run: `promptlab.ui.launch` as `make run` does); yields its
    URL once its health check answers (its script has not run yet)."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        command,
        "run",
        str(script),
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while True:
                try:
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(log.read_text()) from None
                    time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def clean_env(db: Path | None, root: Path = ROOT) -> dict[str, str]:
    """The user's environment minus anything promptlab reads, plus the app's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMPTLAB_")}
    env["PYTHONPATH"] = str(root)
    if db is not None:
        env["PROMPTLAB_DB"] = str(db)
    return env


def load(browser: Browser, url: str) -> Load:
    """Open `url` in a new browser context and time it (see the module docstring)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.goto(url, wait_until="commit", timeout=LOAD_TIMEOUT_MS)
        handle = page.wait_for_function(MEASURE_JS, polling="raf", timeout=LOAD_TIMEOUT_MS)
        times: dict[str, float] = handle.json_value()
        return Load(times["content"] / 1000, times["done"] / 1000)
    finally:
        context.close()


def wait_for_demo_run(browser: Browser, app: str) -> None:
    """Until the Runs page names the demo run completed (its end also records clicks)."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"{app}/runs", timeout=LOAD_TIMEOUT_MS)
        page.locator("h3", has_text="· completed").first.wait_for(timeout=DEMO_TIMEOUT_MS)
    finally:
        context.close()


def element_costs(
    browser: Browser, folder: Path, floor: str, repeats: int
) -> dict[str, list[Load]]:
    """`--elements`: each one-element page and the floor, loaded in turns."""
    loads: dict[str, list[Load]] = {"floor": [], **{name: [] for name in ELEMENT_SCRIPTS}}
    with contextlib.ExitStack() as stack:
        urls = {"floor": floor}
        for name, body in ELEMENT_SCRIPTS.items():
            script = folder / f"element_{name.replace('+', '_').replace(' ', '_')}.py"
            script.write_text(ELEMENT_HEADER + body + "\n")
            log = folder / f"element_{name}.log"
            urls[name] = stack.enter_context(served(script, clean_env(None), log))
            load(browser, f"{urls[name]}/")  # its first run
        for _ in range(repeats):
            for name, url in urls.items():
                loads[name].append(load(browser, f"{url}/"))
    return loads


def report_elements(loads: dict[str, list[Load]], repeats: int) -> None:
    floor_done = median([x.done for x in loads["floor"]])
    print(f"\none element per page: median of {repeats}, seconds (what each costs by itself)")
    for name, runs in loads.items():
        done = median([x.done for x in runs])
        print(f"{name:<18} {done:>7.3f} {done / floor_done:>6.2f}x")


def measure(
    browser: Browser, floor: str, apps: dict[str, str], pages: list[str], repeats: int
) -> dict[str, dict[str, list[Load]]]:
    """Every page of every app and the floor `repeats` times, a round at a time (noise
    falls on all); the apps take turns at going first on each page."""
    loads: dict[str, dict[str, list[Load]]] = {"floor": {"/": []}}
    loads.update({name: {p: [] for p in pages} for name in apps})
    for round_no in range(repeats):
        loads["floor"]["/"].append(load(browser, f"{floor}/"))
        order = list(apps) if round_no % 2 == 0 else list(reversed(apps))
        for path in pages:
            for name in order:
                loads[name][path].append(load(browser, f"{apps[name]}{path}"))
        print(f"  round {round_no + 1}/{repeats} done", file=sys.stderr)
    return loads


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(first: dict[str, Load], loads: dict[str, dict[str, list[Load]]], repeats: int) -> None:
    floor_done = median([x.done for x in loads["floor"]["/"]])
    print(f"\nfresh loads: median of {repeats}, seconds from navigation start")
    print(
        f"{'app':<8} {'page':<13} {'content':>8} {'done':>7} {'min':>7} {'max':>7} {'x floor':>8}"
    )
    for app, pages in loads.items():
        for path, runs in pages.items():
            done = [x.done for x in runs]
            print(
                f"{app:<8} {path:<13} {median([x.content for x in runs]):>8.3f} "
                f"{median(done):>7.3f} {min(done):>7.3f} {max(done):>7.3f} "
                f"{median(done) / floor_done:>8.2f}"
            )
    print("\nfirst load after each server started (an app's builds its demo database)")
    print(f"{'server':<8} {'content':>8} {'done':>7} {'content - floor done':>21}")
    for name, x in first.items():
        margin = x.content - first["floor"].done
        print(f"{name:<8} {x.content:>8.3f} {x.done:>7.3f} {margin:>+21.3f}")
    print("targets: every page <= 1.5x the floor, / <= 2x; first content <= floor + 1 s")
    for app, pages in loads.items():
        if app == "floor":
            continue
        ratios = {p: median([x.done for x in runs]) / floor_done for p, runs in pages.items()}
        inner = {p: r for p, r in ratios.items() if p != "/"}
        parts = []
        if inner:  # `--pages /` measures the first page only
            worst = max(inner, key=inner.__getitem__)
            parts.append(f"worst page {worst} {inner[worst]:.2f}x")
        if "/" in ratios:
            parts.append(f"/ {ratios['/']:.2f}x")
        line = f"{app}: {', '.join(parts)}"
        margin = first[app].content - first["floor"].done
        print(f"{line}, first content floor {margin:+.2f} s")


def launcher(root: Path, args: argparse.Namespace) -> str:
    """The module that serves `root`'s app: `make run`'s launcher with `--make-run` (in a
    checkout that has it), else the `streamlit` command."""
    if args.make_run and (root / "promptlab" / "ui" / "launch.py").exists():
        return "promptlab.ui.launch"
    return "streamlit"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh loads per page")
    parser.add_argument("--pages", nargs="*", default=list(PAGES), help="app addresses")
    parser.add_argument("--chromium", default=CHROMIUM)
    parser.add_argument(
        "--db", type=Path, help="a database to copy for each app (default: a fresh one)"
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="another checkout of the project (e.g. `git archive HEAD`), served beside this "
        "one and measured in the same rounds: a before/after in one run",
    )
    parser.add_argument(
        "--make-run",
        action="store_true",
        help="serve the app as `make run` does (python -m promptlab.ui.launch run app.py, "
        "the same flags): the database opened and the demo started before the port opens",
    )
    parser.add_argument(
        "--elements",
        action="store_true",
        help="also time one-element pages (a dataframe, a Plotly chart, ...) against the floor",
    )
    parser.add_argument(
        "--same-elements",
        action="store_true",
        help="serve beside each page a bare Streamlit page with the same elements and data "
        "and no promptlab code (bench/page_twins.py), measured in the same rounds: "
        "promptlab's own overhead per page",
    )
    return parser.parse_args()


def serve_twin(
    stack: contextlib.ExitStack, browser: Browser, folder: Path, app: str, pages: list[str]
) -> tuple[str, Load]:
    """`--same-elements`: record each page of `app` (warm), serve their bare twin like the
    floor, load it once (its first load, returned) and each of its pages once (its
    warm-up), and say whether each twin page sent what the app's page did."""
    from page_twins import build_twin, capture, fidelity

    captures = {p: capture(browser, f"{app}{p}", MEASURE_JS, LOAD_TIMEOUT_MS) for p in pages}
    script, skipped = build_twin(folder / "twin", {p: c.messages for p, c in captures.items()})
    twin = stack.enter_context(served(script, clean_env(None), folder / "twin" / "twin.log"))
    first = load(browser, f"{twin}/")
    print("twin pages (what each sent, against the app's page):")
    for path in pages:
        again = capture(browser, f"{twin}{path}", MEASURE_JS, LOAD_TIMEOUT_MS)
        print(f"  {path:<13} {fidelity(captures[path], again)}")
    if skipped:
        print(f"  not replayed: {dict(skipped)} (transient elements: spinners)")
    return twin, first


def main() -> None:
    args = parse_args()
    import streamlit
    from playwright.sync_api import sync_playwright

    roots = {"app": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC · {os.cpu_count()} CPUs")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"streamlit {streamlit.__version__} · python {platform.python_version()}")
    for name, root in roots.items():
        print(f"{name}: {root} (served by python -m {launcher(root, args)})")
    with tempfile.TemporaryDirectory(prefix="pl_pages_") as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        (folder / "floor.py").write_text(FLOOR_SCRIPT)
        pw = stack.enter_context(sync_playwright())
        floor = stack.enter_context(
            served(folder / "floor.py", clean_env(None), folder / "floor.log")
        )
        apps = {}
        for name, root in roots.items():
            db = folder / name / "app.duckdb"
            db.parent.mkdir()
            if args.db:
                shutil.copyfile(args.db, db)
            log = folder / name / "streamlit.log"
            apps[name] = stack.enter_context(
                served(root / "app.py", clean_env(db, root), log, root, launcher(root, args))
            )
        browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        print(f"chromium {browser.version}")
        first = {"floor": load(browser, f"{floor}/")}
        for name, url in apps.items():  # one at a time: no demo run going beside it
            first[name] = load(browser, f"{url}/")
            wait_for_demo_run(browser, url)
            for path in args.pages:  # warm-up: each page's first run in its process
                load(browser, f"{url}{path}")
        if args.same_elements:
            apps["twin"], first["twin"] = serve_twin(
                stack, browser, folder, apps["app"], args.pages
            )
        loads = measure(browser, floor, apps, args.pages, args.repeats)
        elements = element_costs(browser, folder, floor, args.repeats) if args.elements else {}
        browser.close()
    report(first, loads, args.repeats)
    if args.same_elements:
        from page_twins import report_twins

        report_twins(loads, args.repeats)
    if elements:
        report_elements(elements, args.repeats)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
