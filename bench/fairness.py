"""One greedy viewer against everyone else: an admin's `GET /v1/runs` at rest and while
a viewer's token floods the server.

    PYTHONPATH=. .venv/bin/python bench/fairness.py [--seconds 10] [--polls 200] [--jobs 150]

Starts `promptlab serve` on a demo database (a child process on a free loopback port)
and makes a viewer token. Side by side in one run:

- `at rest`: the admin's `GET /v1/runs`, one after another, nothing else running;
- `flooded`: the same while the viewer keeps `polls` long polls (`GET /v1/jobs/{id}?
  wait=30`) and `jobs` export jobs (`POST /v1/jobs/table-exports`, then a long poll
  on it) going at once, each starting again as soon as it is answered, after the
  Retry-After of a 429 (as promptlab's client does);
- `hammered`: the same, but the viewer asks again at once after a 429: what no bound
  per principal can make free, since each refusal still costs the server's one
  process a request's parsing (put a proxy's connection limit in front for that).

Prints the admin's p50 and p90 in each, their ratio to rest, and what the viewer got
(answered, refused 429). Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

from promptlab.server.discovery import find_server


async def admin_latencies(url: str, token: str, seconds: float) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    latencies = []
    async with aiohttp.ClientSession(headers=headers) as session:
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            async with session.get(url + "/v1/runs") as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            latencies.append(time.perf_counter() - t0)
    return latencies


async def flood(
    url: str, token: str, polls: int, jobs: int, stop: float, seen: Counter[int], obey: bool
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=polls + jobs)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(
        headers=headers, connector=connector, timeout=timeout
    ) as session:
        body = {"table": "results", "format": "csv"}
        async with session.post(url + "/v1/jobs/table-exports", json=body) as resp:
            held = json.loads(await resp.read())["job_id"]

        async def pause(resp: aiohttp.ClientResponse) -> None:
            if obey and resp.status == 429:
                await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))

        async def poller() -> None:
            while time.perf_counter() < stop:
                async with session.get(f"{url}/v1/jobs/{held}?wait=30") as resp:
                    await resp.read()
                    seen[resp.status] += 1
                await pause(resp)

        async def starter() -> None:
            while time.perf_counter() < stop:
                async with session.post(url + "/v1/jobs/table-exports", json=body) as resp:
                    answer = json.loads(await resp.read())
                    seen[resp.status] += 1
                await pause(resp)
                if resp.status == 202:
                    async with session.get(f"{url}/v1/jobs/{answer['job_id']}?wait=30") as r:
                        await r.read()
                        seen[r.status] += 1

        await asyncio.gather(*(poller() for _ in range(polls)), *(starter() for _ in range(jobs)))


async def flooded(
    url: str, admin: str, viewer: str, args: argparse.Namespace, obey: bool
) -> tuple[list[float], Counter[int]]:
    seen: Counter[int] = Counter()
    stop = time.perf_counter() + args.seconds + 2
    load = asyncio.create_task(flood(url, viewer, args.polls, args.jobs, stop, seen, obey))
    await asyncio.sleep(2)  # the flood at full strength before the admin is timed
    latencies = await admin_latencies(url, admin, args.seconds)
    await load
    return latencies, seen


def row(name: str, lat: list[float], rest: float) -> str:
    q = statistics.quantiles(lat, n=10)
    return f"{name:<8} {len(lat):>6} {q[4] * 1000:>7.1f} {q[8] * 1000:>7.1f} {q[4] / rest:>6.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--polls", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=150)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="promptlab-fair-bench-") as tmp:
        db = Path(tmp) / "demo.duckdb"
        promptlab = [sys.executable, "-m", "promptlab", "--db", str(db)]
        subprocess.run([*promptlab, "init", "--demo"], check=True, capture_output=True)
        made = subprocess.run(
            [*promptlab, "token", "create", "greedy", "--role", "viewer"],
            check=True,
            capture_output=True,
            text=True,
        )
        viewer = next(w for w in made.stdout.split() if w.startswith("pl_"))
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
            rest = asyncio.run(admin_latencies(info.url, info.token, args.seconds))
            busy, seen = asyncio.run(flooded(info.url, info.token, viewer, args, True))
            hammered, seen_hammered = asyncio.run(
                flooded(info.url, info.token, viewer, args, False)
            )
        finally:
            server.terminate()
            server.wait(30)
    floor = statistics.quantiles(rest, n=10)[4]
    print(
        f"admin GET /v1/runs, {args.seconds:g} s each; viewer: {args.polls} long polls, "
        f"{args.jobs} job loops"
    )
    print(f"{'row':<8} {'calls':>6} {'p50 ms':>7} {'p90 ms':>7} {'ratio':>6}")
    print(row("at rest", rest, floor))
    print(row("flooded", busy, floor))
    print(row("hammered", hammered, floor))
    for name, statuses in (("flooded", seen), ("hammered", seen_hammered)):
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
        print(f"viewer's answers by status, {name}: {shown}")


if __name__ == "__main__":
    main()
