"""Screenshots of the real pages for the README's five-minute tour.

Starts the app on a fresh temporary database (its first start loads the demo and runs
the demo experiment), drives headless Chromium through the tour's pages and writes one
PNG per page to docs/images/. Run it again after a page changes, so the pictures stay
true:

    .venv/bin/python docs/screenshots.py            # Debian's /usr/bin/chromium
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
VIEWPORT = {"width": 1280, "height": 900}
STEP_MS = 120_000  # a fresh app's first view takes tens of seconds on a loaded machine
#: (file name, address, visible text that shows the page has drawn its content; a table's
#: cells are drawn on a canvas, so the marker is text outside the tables)
TOUR = [
    ("compare.png", "/compare", "SRM check passed"),
    ("runs.png", "/runs", "Start a run from a YAML spec"),
    ("prompts.png", "/prompts", "Saving creates a new version"),
    ("experiments.png", "/experiments", "Launch on a dataset"),
    ("audit.png", "/audit", "verified ("),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(log.read_text()) from None
            time.sleep(0.25)


def shoot(url: str, chromium: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
        context.set_default_timeout(STEP_MS)
        page = context.new_page()
        # The first start runs the demo experiment in the background: wait until
        # Compare shows its finished run (a new session each time).
        deadline = time.monotonic() + 200
        while True:
            page.goto(url)
            try:
                expect(page.get_by_text("SRM check passed")).to_be_visible(timeout=30_000)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
        for name, address, marker in TOUR:
            page.goto(f"{url}{address}")
            expect(page.get_by_text(re.compile(re.escape(marker))).first).to_be_visible()
            # Charts and tables draw after the text: wait for the page to settle.
            page.wait_for_load_state("networkidle")
            expect(page.locator("[data-testid='stSkeleton']")).to_have_count(0)
            if address == "/compare":
                expect(page.locator(".js-plotly-plot svg.main-svg").first).to_be_visible()
            page.wait_for_timeout(1500)  # let the last redraw finish (a picture, not a test)
            page.screenshot(path=str(IMAGES / name))
            print(f"{name}: {(IMAGES / name).stat().st_size // 1024} KB")
        browser.close()


def main() -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        log = Path(tmp) / "streamlit.log"
        env = {
            **os.environ,
            "PROMPTLAB_DB": str(Path(tmp) / "app.duckdb"),
            "PROMPTLAB_AUTHOR": "docs",
        }
        with log.open("w") as out:
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
                    "--server.address",
                    "127.0.0.1",
                    "--browser.gatherUsageStats",
                    "false",
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            url = f"http://127.0.0.1:{port}"
            try:
                wait_healthy(url, proc, log)
                shoot(url, chromium)
            finally:
                proc.terminate()
                proc.wait(timeout=20)


if __name__ == "__main__":
    main()
