"""How long the CLI takes to start: `--help`, and `run` up to its first request.

    PYTHONPATH=. .venv/bin/python bench/startup.py --repeats 7

Prints, for the same interpreter in one run, the median wall time of
- `python -c pass` (the floor every command pays),
- `python -m promptlab --help`,
- `python -m promptlab run SPEC`, from process start to fakellm receiving the first
  request (a one-row CSV, a keyless loopback endpoint, a database created beforehand),
each with its ratio to the `python -c pass` baseline. The arrival time is taken inside
the server (an aiohttp middleware on a real fakellm app), on the same monotonic clock
as the process start, so no polling blurs it. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import yaml
from aiohttp import web

from promptlab.fakellm.server import FakeLLMConfig, create_app

REPO_ROOT = Path(__file__).resolve().parent.parent
#: How long one `promptlab run` of one row may take before the bench gives up on it.
RUN_TIMEOUT_S = 60.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FirstRequest:
    """Set when the server receives a model request; remembers when (time.monotonic)."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.at = 0.0

    def reset(self) -> None:
        self.arrived.clear()
        self.at = 0.0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST" and not self.arrived.is_set():
            self.at = time.monotonic()
            self.arrived.set()
        return await handler(request)


@contextlib.contextmanager
def fakellm_recording(first: FirstRequest) -> Iterator[str]:
    """A real fakellm app on a free loopback port, in a thread; yields its OpenAI base URL."""
    app = create_app(FakeLLMConfig(port=0))
    app.middlewares.insert(0, first.middleware)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, name="fakellm", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def write_spec(folder: Path, base_url: str) -> Path:
    (folder / "rows.csv").write_text("text\nhello\n")
    spec = {
        "name": "startup-bench",
        "dataset": "rows.csv",
        "variants": [
            {
                "name": "only",
                "messages": [{"role": "user", "content": "Say: {{ text }}"}],
                "model": "fake:gpt-4o-mini",
                "params": {"max_tokens": 8},
            }
        ],
        "endpoints": {"fake": {"kind": "openai", "base_url": base_url}},
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def clean_env(db: Path) -> dict[str, str]:
    """The user's environment minus anything promptlab reads, plus this bench's database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMPTLAB_")}
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"):
        env.pop(name, None)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PROMPTLAB_DB"] = str(db)
    return env


def wall_time(argv: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def run_to_first_request(argv: list[str], env: dict[str, str], first: FirstRequest) -> float:
    first.reset()
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not first.arrived.wait(RUN_TIMEOUT_S):
        proc.kill()
        raise SystemExit(f"no request within {RUN_TIMEOUT_S} s: {proc.communicate()[1]!r}")
    # Let the one-row run finish so the next repetition finds the database free.
    _out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    if proc.returncode != 0:
        raise SystemExit(f"promptlab run exited {proc.returncode}: {err.decode()}")
    return first.at - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    python = sys.executable
    first = FirstRequest()
    with tempfile.TemporaryDirectory() as tmp, fakellm_recording(first) as base_url:
        folder = Path(tmp)
        env = clean_env(folder / "bench.duckdb")
        spec = write_spec(folder, base_url)
        cases: dict[str, Callable[[], float]] = {
            "python -c pass": lambda: wall_time([python, "-c", "pass"], env),
            "promptlab --help": lambda: wall_time([python, "-m", "promptlab", "--help"], env),
            "run to 1st request": lambda: run_to_first_request(
                [python, "-m", "promptlab", "run", "--quiet", str(spec)], env, first
            ),
        }
        # One untimed pass: creates the database and warms the file cache.
        subprocess.run(
            [python, "-m", "promptlab", "init"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        for measure in cases.values():
            measure()
        medians = {}
        for name, measure in cases.items():
            times = [measure() for _ in range(args.repeats)]
            medians[name] = statistics.median(times)
            spread = f"min {min(times):.3f}  max {max(times):.3f}"
            print(f"{name:<20} median {medians[name]:.3f} s  ({spread}, n={args.repeats})")
        baseline = medians["python -c pass"]
        for name, median in medians.items():
            print(f"{name:<20} {median / baseline:5.1f} x python -c pass")


if __name__ == "__main__":
    main()
