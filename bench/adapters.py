"""Requests/s through the SDK OpenAI adapter, the lean HTTP adapter and a bare aiohttp loop.

    PYTHONPATH=. .venv/bin/python bench/adapters.py --requests 5000 --concurrency 64

One `promptlab fakellm --latency-ms 0` subprocess on a free loopback port serves all
three: N requests each, after a warm-up, in interleaved rounds (see `bench`). The
server answers at once, so the figures are the clients' cost per request. Not a
test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fakellm_ceiling import PROMPT_VARIETY, free_port, wait_ready  # noqa: E402
from promptlab.providers.base import CompletionRequest  # noqa: E402
from promptlab.providers.config import EndpointConfig  # noqa: E402
from promptlab.providers.http import OpenAIHttpProvider  # noqa: E402
from promptlab.providers.openai import OpenAIProvider  # noqa: E402
from promptlab.providers.wire import openai_body  # noqa: E402

WARMUP_REQUESTS = 200
KEY = "sk-bench"


def requests_for(total: int) -> list[CompletionRequest]:
    prompts = [
        f"Write a concise tagline number {i} for a reusable water bottle."
        for i in range(PROMPT_VARIETY)
    ]
    return [
        CompletionRequest(
            model="fast",
            messages=({"role": "user", "content": prompts[i % PROMPT_VARIETY]},),
            max_tokens=64,
            request_id=f"bench-{i}",
        )
        for i in range(total)
    ]


async def run_pool(
    send: Callable[[CompletionRequest], Awaitable[object]],
    requests: list[CompletionRequest],
    concurrency: int,
) -> float:
    """Send every request with `concurrency` workers; seconds taken."""
    queue = iter(requests)

    async def worker() -> None:
        for request in queue:
            await send(request)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def bench(base_url: str, total: int, concurrency: int, rounds: int) -> dict[str, float]:
    """Requests/s of each client: `total` requests each, in interleaved rounds.

    The machine is shared (the server, other jobs), so a client measured in one block
    would take whatever load that moment had; rounds in rotating order spread it evenly.
    """
    endpoint = EndpointConfig(
        name="bench", kind="openai", base_url=base_url, concurrency=concurrency
    )
    sdk = OpenAIProvider(endpoint, KEY)
    lean = OpenAIHttpProvider(endpoint, KEY)
    url = f"{base_url}/chat/completions"
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    session = aiohttp.ClientSession(connector=connector)

    async def bare(request: CompletionRequest) -> object:
        """The floor: aiohttp posting the same body (orjson), reading and parsing the answer."""
        body = orjson.dumps(openai_body(request, "max_tokens"))
        async with session.post(url, data=body, headers=headers) as resp:
            return orjson.loads(await resp.read())

    senders: dict[str, Callable[[CompletionRequest], Awaitable[object]]] = {
        "sdk": sdk.complete,
        "lean": lean.complete,
        "bare": bare,
    }
    requests = requests_for(total)
    per_round = [requests[i::rounds] for i in range(rounds)]
    elapsed = dict.fromkeys(senders, 0.0)
    try:
        for send in senders.values():
            await run_pool(send, requests[:WARMUP_REQUESTS], concurrency)
        names = list(senders)
        for index, chunk in enumerate(per_round):
            for name in names[index % 3 :] + names[: index % 3]:
                elapsed[name] += await run_pool(senders[name], chunk, concurrency)
    finally:
        await sdk.aclose()
        await lean.aclose()
        await session.close()
    return {name: total / seconds for name, seconds in elapsed.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds per client")
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "fakellm", "--port", str(port), "--latency-ms", "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_ready(base)
        rates = asyncio.run(bench(f"{base}/v1", args.requests, args.concurrency, args.rounds))
        with urllib.request.urlopen(f"{base}/_stats") as resp:  # noqa: S310 - loopback
            stats = json.loads(resp.read())
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(
        f"requests={args.requests} per client, concurrency={args.concurrency}, "
        f"{args.rounds} interleaved rounds (fakellm --latency-ms 0)"
    )
    for name, label in (
        ("sdk", "SDK OpenAI adapter"),
        ("lean", "lean HTTP adapter"),
        ("bare", "bare aiohttp loop"),
    ):
        print(f"  {label:<20} {rates[name]:>8,.0f} req/s")
    print(
        f"  lean / bare {rates['lean'] / rates['bare']:.2f}   "
        f"SDK / bare {rates['sdk'] / rates['bare']:.2f}   "
        f"lean / SDK {rates['lean'] / rates['sdk']:.2f}"
    )
    print(f"server: attempts {stats['attempts']} successes {stats['successes']}")


if __name__ == "__main__":
    main()
