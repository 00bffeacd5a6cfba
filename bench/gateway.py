"""The live gateway against calling the provider directly: latency added, first byte, and
the most calls/s one owner serves.

    PYTHONPATH=. .venv/bin/python bench/gateway.py [--seconds 8] [--latency-ms 50]

Starts `promptlab fakellm` (a fixed --latency-ms per answer, no limits) and `promptlab
serve` on a fresh database whose one prompt is served from that fakellm, each a child
process on a free loopback port. Then, side by side in one run, an aiohttp load
generator in this process sends the same chat completion

- `direct`: to fakellm, the version's rendered messages as the body;
- `gateway`: to promptlab with `model: prompt:bench@latest` and its variables, which
  renders the same messages, sends them through the engine's limiter and records the
  call (journal, then the database every 0.25 s);

at a fixed arrival rate (open loop: 50 and 200 calls/s, for --seconds each), streamed
and not. Prints p50 and p99 of the whole call and of its text's first byte (a stream's
first content, not the empty role chunk a provider sends at once), and the
gateway's p50/p99 minus the direct one's: the latency the gateway adds. Then each
path's most calls/s with 64 clients back to back (closed loop). With `redis-server` on
this machine, the owner is then started again with `--gateway-relay` beside two
`promptlab gateway` processes (no database; promptlab/gateway/standalone.py) on a Redis
of the bench's own, and the same 64 clients, half on each gateway, give their calls/s
beside the owner's and the direct path's; then an experiment is killed through the
owner (`promptlab experiment set bench-ab --kill`) and the time until both gateways
serve every unit its control is printed. Last, where the gateway's own time goes: its
parse, prepare and record steps timed in this process.
Every process shares this machine's two cores: the load generator and fakellm take
their part of them in both columns. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

KEY = "sk-bench-gateway-0123456789abcdef"
MESSAGES = [
    {"role": "system", "content": "You are a support assistant. Answer in two sentences."},
    {"role": "user", "content": "Customer wrote: I was charged twice this month."},
]


@dataclass
class Timed:
    """One call: seconds to the whole answer and to its first body byte."""

    total: float
    first_byte: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def set_up(db: Path, fake_url: str) -> tuple[Path, str]:
    """The providers file and the database with the bench prompt; a gateway token."""
    from promptlab.config import Settings
    from promptlab.prompts.templates import Template
    from promptlab.workbench import Workbench

    providers = db.with_name("providers.yaml")
    endpoint = {
        "kind": "openai",
        "base_url": f"{fake_url}/v1",
        "api_key_env": "BENCH_GATEWAY_KEY",
        "rpm": 10_000_000,
        "tpm": 10_000_000_000,
        "concurrency": 1024,
        "models": {"*": {"context_window": 8192}},
    }
    providers.write_text(yaml.safe_dump({"endpoints": {"fake": endpoint}}))
    os.environ.update(PROMPTLAB_PROVIDERS=str(providers), BENCH_GATEWAY_KEY=KEY)
    template = Template.build(
        [
            {"role": "system", "content": MESSAGES[0]["content"]},
            {"role": "user", "content": "Customer wrote: {{ ticket }}"},
        ],
        params={"model": "fake:gpt-bench", "max_tokens": 64},
        variables={"ticket": {"type": "string", "maxLength": 2000}},
    )
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        wb.prompts.create("bench", template)
        # Two variants of the one version: the fleet's kill is timed on it.
        variants = [
            {"name": "a", "prompt": "bench", "control": True, "weight": 1},
            {"name": "b", "prompt": "bench", "weight": 1},
        ]
        wb.experiments.add({"name": "bench-ab", "variants": variants})
        token = wb.tokens.create("bench-app", "gateway")[1]
    return providers, token


def bodies(stream: bool) -> dict[str, dict[str, Any]]:
    common: dict[str, Any] = {"max_tokens": 64, "stream": stream, "user": "unit-1"}
    if stream:  # the gateway asks its provider for usage: so does the direct call
        common["stream_options"] = {"include_usage": True}
    return {
        "direct": {**common, "model": "gpt-bench", "messages": MESSAGES},
        "gateway": {
            **common,
            "model": "prompt:bench@latest",
            "messages": [],
            "variables": {"ticket": "I was charged twice this month."},
        },
    }


#: The first text of an answer, whole or streamed: an OpenAI stream opens with an empty
#: role chunk, which a provider sends before it has generated anything.
FIRST_TEXT = re.compile(rb'"content":\s*"[^"]')


async def one(session: aiohttp.ClientSession, url: str, body: bytes) -> Timed:
    """The call's time to its whole answer and to the first byte of its text."""
    started = time.perf_counter()
    seen, first_at = b"", None
    async with session.post(url, data=body) as resp:
        while chunk := await resp.content.readany():
            if first_at is None:
                seen += chunk
                if FIRST_TEXT.search(seen):
                    first_at = time.perf_counter()
        if resp.status != 200 or first_at is None:
            raise RuntimeError(f"{url}: HTTP {resp.status}")
    return Timed(time.perf_counter() - started, first_at - started)


def session_for(token: str, clients: int) -> aiohttp.ClientSession:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients), headers=headers)


async def open_loop(url: str, token: str, body: bytes, rate: float, seconds: float) -> list[Timed]:
    """Calls sent at `rate` per second for `seconds`, whatever the answers' pace."""
    async with session_for(token, 2048) as session:
        await one(session, url, body)  # a warm connection and a warm route
        start = time.perf_counter()
        tasks = []
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(session, url, body)))
        return list(await asyncio.gather(*tasks))


async def closed_loop(url: str, token: str, body: bytes, clients: int, seconds: float) -> float:
    """Calls per second with `clients` connections sending back to back."""
    done = 0
    async with session_for(token, clients) as session:
        stop = time.perf_counter() + seconds

        async def client() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                await one(session, url, body)
                done += 1

        await asyncio.gather(*(client() for _ in range(clients)))
    return done / seconds


async def split_loop(
    urls: list[str], token: str, body: bytes, clients: int, seconds: float
) -> float:
    """Calls per second with `clients` connections spread evenly over `urls`."""
    share = clients // len(urls)
    rates = await asyncio.gather(*(closed_loop(u, token, body, share, seconds) for u in urls))
    return sum(rates)


def fleet_most(db: Path, env: dict[str, str], token: str, tmp: Path, seconds: float) -> float:
    """Most calls/s through two `promptlab gateway` processes beside a relaying owner."""
    redis_port, ports = free_port(), [free_port(), free_port()]
    env = {
        **env,
        "PROMPTLAB_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
        "PROMPTLAB_WORKER_SECRET_FILE": str(tmp / "worker-secret"),
    }
    redis = [shutil.which("redis-server") or "redis-server", "--port", str(redis_port)]
    procs = [start(redis + ["--bind", "127.0.0.1", "--save", "", "--dir", str(tmp)], env)]
    try:
        serve = [sys.executable, "-m", "promptlab", "--db", str(db), "serve", "--port", "0"]
        procs.append(start(serve + ["--gateway-relay"], env))
        from promptlab.server.discovery import find_server

        wait_for(lambda: find_server(db) is not None, "promptlab serve --gateway-relay")
        for port in ports:
            gateway = [sys.executable, "-m", "promptlab", "gateway", "--port", str(port)]
            procs.append(start(gateway + ["--state-dir", str(tmp / f"gw-{port}")], env))
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        wait_for(lambda: all(healthy(u) for u in urls), "promptlab gateway")
        body = orjson.dumps(bodies(False)["gateway"])
        calls = [f"{u}/v1/chat/completions" for u in urls]
        most = asyncio.run(split_loop(calls, token, body, 64, seconds))
        kill = [sys.executable, "-m", "promptlab", "--db", str(db), "experiment", "set"]
        subprocess.run(kill + ["bench-ab", "--kill"], env=env, check=True, capture_output=True)
        killed_at = time.perf_counter()
        reached = asyncio.run(all_control(calls, token))
        print(f"a kill through the owner reached both gateways in {reached - killed_at:.2f} s")
        return most
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(30)


async def all_control(urls: list[str], token: str) -> float:
    """perf_counter once every gateway serves 40 units of bench-ab its control (the
    figure is late by up to one answer's time, --latency-ms)."""
    units = [f"unit-{n}" for n in range(40)]
    async with session_for(token, 40) as session:

        async def variant(url: str, unit: str) -> str:
            body = {**bodies(False)["gateway"], "model": "experiment:bench-ab", "user": unit}
            async with session.post(url, data=orjson.dumps(body)) as resp:
                await resp.read()
                return resp.headers.get("Promptlab-Variant", "?")

        for url in urls:  # all units at once: a pass takes one answer's time
            while set(await asyncio.gather(*(variant(url, u) for u in units))) != {"a"}:
                pass
    return time.perf_counter()


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def q(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100)[p - 1] * 1000


def start(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start in 60 s")
        time.sleep(0.1)


def answers(url: str) -> bool:
    try:
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), 0.2).close()
    except OSError:
        return False
    return True


def own_steps(db: Path, rounds: int = 2_000) -> dict[str, float]:
    """Microseconds per call of the gateway's own steps, in this process, on the same
    database: reading the body, preparing the request, writing the journal's record."""
    from promptlab.config import Settings
    from promptlab.gateway.calls import openai_call
    from promptlab.server.gateway_routes import Gateways
    from promptlab.workbench import Workbench

    raw = orjson.dumps(bodies(False)["gateway"])
    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        gateways = Gateways(wb, lambda name: None)
        gateway = gateways.get()
        prepared = gateway.prepare(openai_call(raw, None))
        timings = {}
        t0 = time.perf_counter()
        for _ in range(rounds):
            call = openai_call(raw, None)
        timings["parse"] = (time.perf_counter() - t0) / rounds * 1e6
        t0 = time.perf_counter()
        for _ in range(rounds):
            prepared = gateway.prepare(call)
        timings["prepare"] = (time.perf_counter() - t0) / rounds * 1e6
        t0 = time.perf_counter()
        for _ in range(rounds):
            gateway.record(prepared, None, None, "bench")
        timings["record (journal)"] = (time.perf_counter() - t0) / rounds * 1e6
        t0 = time.perf_counter()
        gateway.journal.flush()
        timings["fold into DuckDB"] = (time.perf_counter() - t0) / rounds * 1e6
        gateways.close()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rates", default="50,200")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="promptlab-gateway-bench-") as tmp:
        db = Path(tmp) / "bench.duckdb"
        port = free_port()
        fake_url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        fake = start(
            [sys.executable, "-m", "promptlab", "fakellm", "--port", str(port)]
            + ["--latency-ms", str(args.latency_ms)],
            env,
        )
        server = None
        try:
            wait_for(lambda: answers(fake_url), "fakellm")
            _, token = set_up(db, fake_url)
            env.update(PROMPTLAB_PROVIDERS=os.environ["PROMPTLAB_PROVIDERS"])
            env.update(BENCH_GATEWAY_KEY=KEY)
            serve = [sys.executable, "-m", "promptlab", "--db", str(db), "serve", "--port", "0"]
            server = start(serve, env)
            from promptlab.server.discovery import find_server

            info = None

            def found() -> bool:
                nonlocal info
                info = find_server(db)
                return info is not None

            wait_for(found, "promptlab serve")
            assert info is not None
            urls = {
                "direct": (f"{fake_url}/v1/chat/completions", KEY),
                "gateway": (f"{info.url}/v1/chat/completions", token),
            }
            load = os.getloadavg()[0]
            now = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
            print(
                f"fakellm --latency-ms {args.latency_ms:g}; {args.seconds:g} s per row; "
                f"load {load:.1f} at the start; {now} UTC"
            )
            print(
                f"{'calls/s':>7} {'stream':>6} {'path':>8} {'calls':>6} {'p50 ms':>7} "
                f"{'p99 ms':>7} {'1st p50':>7} {'1st p99':>7}  added p50/p99 (1st byte)"
            )
            for rate in [float(r) for r in args.rates.split(",")]:
                for stream in (False, True):
                    seen: dict[str, list[Timed]] = {}
                    for path, (url, key) in urls.items():
                        body = orjson.dumps(bodies(stream)[path])
                        seen[path] = asyncio.run(open_loop(url, key, body, rate, args.seconds))
                        total = [t.total for t in seen[path]]
                        first = [t.first_byte for t in seen[path]]
                        added = ""
                        if path == "gateway":
                            d_total = [t.total for t in seen["direct"]]
                            d_first = [t.first_byte for t in seen["direct"]]
                            added = (
                                f"  +{q(total, 50) - q(d_total, 50):.1f} / "
                                f"+{q(total, 99) - q(d_total, 99):.1f} ms "
                                f"(+{q(first, 50) - q(d_first, 50):.1f} / "
                                f"+{q(first, 99) - q(d_first, 99):.1f})"
                            )
                        print(
                            f"{rate:>7.0f} {'yes' if stream else 'no':>6} {path:>8} "
                            f"{len(total):>6} {q(total, 50):>7.1f} {q(total, 99):>7.1f} "
                            f"{q(first, 50):>7.1f} {q(first, 99):>7.1f}{added}"
                        )
            most = {}
            for path, (url, key) in urls.items():
                body = orjson.dumps(bodies(False)[path])
                most[path] = asyncio.run(closed_loop(url, key, body, 64, args.seconds))
            print(
                f"most calls/s, 64 clients back to back, not streamed: direct "
                f"{most['direct']:.0f}, gateway {most['gateway']:.0f} "
                f"(ratio {most['gateway'] / most['direct']:.2f})"
            )
            server.terminate()
            server.wait(30)
            if shutil.which("redis-server"):
                two = fleet_most(db, env, token, Path(tmp), args.seconds)
                print(
                    f"through two gateway processes beside one owner: {two:.0f} calls/s "
                    f"(ratio {two / most['direct']:.2f} to direct, "
                    f"{two / most['gateway']:.2f} to the owner alone)"
                )
            else:
                print("two gateway processes: not measured (no redis-server here)")
        finally:
            for proc in (server, fake):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(30)
        steps = own_steps(db)
        print("the gateway's own steps, per call, in one process (µs):")
        for name, us in steps.items():
            print(f"  {name:<18} {us:8.1f}")


if __name__ == "__main__":
    main()
