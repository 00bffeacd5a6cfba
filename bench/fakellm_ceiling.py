"""Measure fakellm's ceiling: requests/s a plain aiohttp client gets from one server process.

    .venv/bin/python bench/fakellm_ceiling.py --requests 30000 --concurrency 64

Starts `promptlab fakellm` as a subprocess on a free loopback port (so server and
client each get a core), sends chat completions with varied prompts, prints figures.
Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
#: Distinct prompts, so the server cannot get by on one cached answer.
PROMPT_VARIETY = 256


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to see the server's own cost."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def wait_ready(base: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/_stats", timeout=1):  # noqa: S310 - loopback
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("fakellm did not start")


def body(i: int, fmt: str, stream: bool) -> bytes:
    text = f"Write a concise tagline number {i % PROMPT_VARIETY} for a reusable water bottle."
    payload: dict[str, object] = {
        "model": "fast",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
    }
    if stream:
        payload["stream"] = True
    return json.dumps(payload).encode()


async def drive(
    base: str, total: int, concurrency: int, fmt: str, stream: bool, server_pid: int
) -> None:
    path = "/v1/messages" if fmt == "anthropic" else "/v1/chat/completions"
    bodies = [body(i, fmt, stream) for i in range(PROMPT_VARIETY)]
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    counter = iter(range(total))
    headers = {"content-type": "application/json", "x-api-key": "bench"}

    async def worker(session: aiohttp.ClientSession) -> None:
        for i in counter:
            started = time.perf_counter()
            async with session.post(
                base + path, data=bodies[i % PROMPT_VARIETY], headers=headers
            ) as resp:
                await resp.read()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
            latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Warm up connections and the tokenizer before timing.
        await asyncio.gather(*(session.post(base + path, data=bodies[0]) for _ in range(8)))
        cpu_before = cpu_seconds(server_pid)
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        server_cpu = cpu_seconds(server_pid) - cpu_before
    latencies.sort()
    print(f"format={fmt} stream={stream} requests={total} concurrency={concurrency}")
    print(f"elapsed {elapsed:.2f}s  throughput {total / elapsed:,.0f} req/s  statuses {statuses}")
    # The server's CPU per request gives its ceiling on one free core, whatever else
    # (the client, other jobs) was competing for the machine during the run.
    per_request_us = server_cpu / total * 1e6
    print(
        f"server CPU {server_cpu:.2f}s = {per_request_us:.0f} us/request  "
        f"-> one-core ceiling {total / server_cpu:,.0f} req/s"
    )
    print(
        f"latency ms: p50 {statistics.median(latencies) * 1000:.2f}  "
        f"p99 {latencies[int(len(latencies) * 0.99)] * 1000:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--format", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "fakellm", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_ready(base)
        asyncio.run(
            drive(base, args.requests, args.concurrency, args.format, args.stream, server.pid)
        )
        with urllib.request.urlopen(f"{base}/_stats") as resp:  # noqa: S310 - loopback
            stats = json.loads(resp.read())
        print(f"server stats: attempts {stats['attempts']} successes {stats['successes']}")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
