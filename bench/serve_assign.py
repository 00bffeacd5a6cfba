"""Live assignment through `promptlab serve`: requests/s and latency at 50 clients.

    PYTHONPATH=. .venv/bin/python bench/serve_assign.py [--clients 50] [--seconds 10]

Starts `promptlab serve` on a demo database (a child process on a free loopback port),
then drives it with an aiohttp load generator: `clients` connections each sending
requests back to back for `seconds`. Side by side in one run:

- `health`: `GET /v1/health` (token check and a small JSON answer): the server's floor;
- `assign 1`: `POST /v1/assign` for one unit (what a live service does per request);
- `assign 100`: one call for 100 units (a batch).

Prints requests/s, units/s and p50/p99 latency per row, and each row's requests/s as a
ratio of the floor. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from promptlab.server.discovery import find_server


async def drive(
    url: str, token: str, method: str, path: str, body: Any, clients: int, seconds: float
) -> list[float]:
    """Latencies (s) of every request `clients` connections sent in `seconds`."""
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        stop = time.perf_counter() + seconds

        async def client() -> None:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                async with session.request(method, url + path, json=body) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{path}: HTTP {resp.status}")
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(client() for _ in range(clients)))
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="promptlab-serve-bench-") as tmp:
        db = Path(tmp) / "demo.duckdb"
        promptlab = [sys.executable, "-m", "promptlab", "--db", str(db)]
        subprocess.run([*promptlab, "init", "--demo"], check=True, capture_output=True)
        server = subprocess.Popen(
            [*promptlab, "serve", "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            info = None
            while info is None:
                time.sleep(0.1)
                info = find_server(db)
            rows = [
                ("health", "GET", "/v1/health", None, 0),
                (
                    "assign 1",
                    "POST",
                    "/v1/assign",
                    {"experiment": "triage-split", "unit_id": "customer-7"},
                    1,
                ),
                (
                    "assign 100",
                    "POST",
                    "/v1/assign",
                    {
                        "experiment": "triage-split",
                        "unit_ids": [f"customer-{i}" for i in range(100)],
                    },
                    100,
                ),
            ]
            floor = None
            print(f"{args.clients} clients, {args.seconds:g} s each, one server process")
            print(
                f"{'row':<12} {'req/s':>8} {'units/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'ratio':>6}"
            )
            for name, method, path, body, units in rows:
                lat = asyncio.run(
                    drive(info.url, info.token, method, path, body, args.clients, args.seconds)
                )
                rps = len(lat) / args.seconds
                floor = floor or rps
                q = statistics.quantiles(lat, n=100)
                print(
                    f"{name:<12} {rps:>8.0f} {rps * units:>9.0f} {q[49] * 1000:>7.1f} "
                    f"{q[98] * 1000:>7.1f} {rps / floor:>6.2f}"
                )
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
