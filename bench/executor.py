"""Benchmark the engine against `promptlab fakellm`, each scenario beside a baseline.

    .venv/bin/python bench/executor.py                 # every scenario, full size
    .venv/bin/python bench/executor.py --only rpm,crash --scale 0.5

The baseline is what people write by hand: the official `AsyncOpenAI` client (its
default 2 retries) under an `asyncio.Semaphore`. fakellm runs as a subprocess on its
own core. The peer is the best hand-written client: bare aiohttp, `aiolimiter` for the
endpoint's rpm (and tpm), `tenacity` retries (jittered exponential backoff, at least the
server's retry-after, 6 attempts) and a semaphore. Prints one table; asserts nothing.
"ideal s" is the physical best: fakellm's buckets start full and hold SERVER_BURST_S of
traffic, so a perfect client sends that at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import yaml
from peer import Peer  # bench/peer.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
MODEL = "gpt-4o-mini"
#: Semaphore size of the baseline in limited scenarios: a typical hand-picked value.
BASELINE_CONCURRENCY = 32
#: Client timeout in the fault scenario, for both clients (the server holds timeouts 120 s).
FAULT_TIMEOUT_S = 2.0
#: Seconds of traffic fakellm's buckets hold (its --burst-s default); they start full,
#: so the physical best sends that much at once and the rest at the limit.
SERVER_BURST_S = 10.0
#: Steady state is measured between these shares of completions.
STEADY_FROM, STEADY_TO = 0.1, 0.9
#: A window of this many seconds with no 429 after the last one counts as converged.
CONVERGE_QUIET_S = 5.0


@dataclass
class Row:
    scenario: str
    client: str
    requests: int
    ok: int
    failed: int
    lost: int
    wall_s: float
    ideal_s: float | None
    steady_share: float | None  # steady throughput / server limit
    share_429: float | None
    note: str = ""


# ---- fakellm as a subprocess -------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def fakellm(*args: str) -> Iterator[str]:
    """Start `promptlab fakellm` with `args`; yield its OpenAI base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "promptlab", "fakellm", "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(OSError):
                stats(base)
                break
            time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def stats(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/_stats") as resp:  # noqa: S310 - loopback
        data: dict[str, Any] = json.loads(resp.read())
        return data


# ---- workloads ---------------------------------------------------------------------


def prompts(n: int, varied: bool, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "a",
        "lazy",
        "dog",
        "while",
        "the",
        "cat",
        "naps",
    ]
    out = []
    for i in range(n):
        length = rng.randint(20, 600) if varied else 12
        out.append(f"item {i}: " + " ".join(rng.choice(words) for _ in range(length)))
    return out


def write_dataset(directory: Path, texts: list[str]) -> Path:
    path = directory / "rows.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text"])
        writer.writerows([t] for t in texts)
    return path


def spec_for(
    dataset: Path, base: str, *, max_tokens: int, limits: dict[str, Any], retry: dict[str, Any]
) -> dict[str, Any]:
    return {
        "name": "bench",
        "dataset": str(dataset),
        "variants": [
            {
                "name": "v",
                "messages": [{"role": "user", "content": "{{ text }}"}],
                "model": f"fake:{MODEL}",
                "params": {"max_tokens": max_tokens, "temperature": 0.0},
            }
        ],
        # The endpoint's own limits (what a providers file would say): the engine spends
        # the headroom the server reports within them.
        "endpoints": {"fake": {"kind": "openai", "base_url": f"{base}/v1", **limits}},
        "retry": retry,
    }


def steady_rate(times: list[float]) -> float | None:
    """Completions per second between the 10% and 90% marks (start and tail excluded)."""
    times = sorted(times)
    if len(times) < 10:
        return None
    a, b = int(len(times) * STEADY_FROM), int(len(times) * STEADY_TO)
    span = times[b] - times[a]
    return (b - a) / span if span > 0 else None


# ---- a lean provider, to separate the engine's cost from the SDK's ------------------


class AiohttpProvider:
    """OpenAI wire format over a bare aiohttp session: what the engine costs without the SDK."""

    kind = "openai"
    supports_json_schema = False

    def __init__(self, name: str, base_url: str) -> None:
        self.name = name
        self.url = f"{base_url}/chat/completions"
        self._session: aiohttp.ClientSession | None = None

    async def complete(self, request: Any) -> Any:
        from promptlab.errors import ErrorKind, ProviderError
        from promptlab.providers.base import CompletionResponse, FinishReason

        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        body = {
            "model": request.model,
            "messages": [dict(m) for m in request.messages],
            "max_tokens": request.max_tokens,
        }
        t0 = time.perf_counter()
        headers = {"x-client-request-id": request.request_id or ""}
        async with self._session.post(self.url, json=body, headers=headers) as resp:
            data = await resp.json(content_type=None)
            if resp.status >= 400:
                kind = ErrorKind.RATE_LIMIT if resp.status == 429 else ErrorKind.SERVER
                raise ProviderError(kind, str(data), status=resp.status, headers=dict(resp.headers))
            kept = {k.lower(): v for k, v in resp.headers.items() if "ratelimit" in k.lower()}
        usage = data.get("usage") or {}
        return CompletionResponse(
            text=data["choices"][0]["message"]["content"] or "",
            input_tokens=usage.get("prompt_tokens", 0),
            output_tokens=usage.get("completion_tokens", 0),
            finish_reason=FinishReason.STOP,
            model_version=data.get("model", ""),
            latency_ms=(time.perf_counter() - t0) * 1000,
            headers=kept,
            request_id=request.request_id,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


# ---- the engine --------------------------------------------------------------------


def run_engine(
    workdir: Path,
    base: str,
    texts: list[str],
    *,
    max_tokens: int,
    limits: dict[str, Any],
    retry: dict[str, Any] | None = None,
    lean: bool = False,
) -> dict[str, Any]:
    """Run the texts through a fresh Engine with persistence on; return measurements."""
    from promptlab.engine import Engine, parse_spec
    from promptlab.evaluation.ended import run_ended
    from promptlab.store import Store

    dataset = write_dataset(workdir, texts)
    spec = parse_spec(
        spec_for(dataset, base, max_tokens=max_tokens, limits=limits, retry=retry or {})
    )
    db = workdir / f"engine-{time.monotonic_ns()}.duckdb"
    factory: dict[str, Any] = (
        {"provider_factory": lambda cfg: AiohttpProvider(cfg.name, f"{base}/v1")} if lean else {}
    )
    with Store(db) as store, Engine(store, on_run_ended=run_ended, **factory) as engine:
        t0 = time.monotonic()
        run_id = engine.submit(spec)
        final = engine.wait(run_id)
        wall = time.monotonic() - t0
        with store.read() as cur:
            done = cur.execute(
                "SELECT epoch(finished_at) FROM results WHERE run_id = ? AND status = 'succeeded'",
                [run_id],
            ).fetchall()
            throttles = cur.execute(
                "SELECT epoch(ended_at) FROM attempts "
                "WHERE run_id = ? AND error_kind = 'rate_limit'",
                [run_id],
            ).fetchall()
            start = cur.execute(
                "SELECT epoch(started_at) FROM runs WHERE run_id = ?", [run_id]
            ).fetchone()
            finals = cur.execute(
                "SELECT count(DISTINCT idempotency_key), count(*) FROM results WHERE run_id = ?",
                [run_id],
            ).fetchone()
    assert start is not None and finals is not None
    return {
        "ok": final.succeeded,
        "failed": final.failed + final.cancelled,
        "lost": len(texts) - int(finals[0]),
        "wall": wall,
        "times": [r[0] for r in done],
        "throttle_times": [r[0] - start[0] for r in throttles],
        "start": start[0],
    }


# ---- the baseline ------------------------------------------------------------------


def run_baseline(
    base: str,
    texts: list[str],
    *,
    max_tokens: int,
    concurrency: int,
    timeout_s: float = 600.0,
    aiohttp_transport: bool = False,
) -> dict[str, Any]:
    """AsyncOpenAI (default retries) under a semaphore; every exception is a failed item.

    `aiohttp_transport` gives the client the SDK's aiohttp transport, as the adapter uses.
    """

    async def main() -> dict[str, Any]:
        extra: dict[str, Any] = (
            {"http_client": openai.DefaultAioHttpClient()} if aiohttp_transport else {}
        )
        client = openai.AsyncOpenAI(
            base_url=f"{base}/v1", api_key="bench", timeout=timeout_s, **extra
        )
        gate = asyncio.Semaphore(concurrency)
        times: list[float] = []
        failed = 0

        async def one(text: str) -> None:
            nonlocal failed
            async with gate:
                try:
                    await client.chat.completions.create(
                        model=MODEL,
                        messages=[{"role": "user", "content": text}],
                        max_tokens=max_tokens,
                        temperature=0.0,
                    )
                    times.append(time.time())
                except openai.OpenAIError:
                    failed += 1

        t0 = time.monotonic()
        await asyncio.gather(*(one(t) for t in texts))
        wall = time.monotonic() - t0
        await client.close()
        return {"ok": len(times), "failed": failed, "lost": 0, "wall": wall, "times": times}

    return asyncio.run(main())


def bare_aiohttp(base: str, n: int, concurrency: int) -> float:
    """Requests/s of a bare aiohttp loop: no SDK, no retries, no storage."""

    async def main() -> float:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
        queue = iter(range(n))
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def worker() -> None:
                for _ in queue:
                    async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
                        await resp.read()

            t0 = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return n / (time.monotonic() - t0)

    return asyncio.run(main())


# ---- scenarios ---------------------------------------------------------------------


CLIENTS = ("engine", "baseline", "peer")


def run_client(
    client: str,
    workdir: Path,
    base: str,
    texts: list[str],
    *,
    max_tokens: int,
    limits: dict[str, Any],
    concurrency: int,
    timeout_s: float = 600.0,
    engine_retry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One client's run; the peer gets the endpoint's rpm and tpm, as the engine does."""
    if client == "engine":
        return run_engine(
            workdir, base, texts, max_tokens=max_tokens, limits=limits, retry=engine_retry
        )
    if client == "baseline":
        return run_baseline(
            base, texts, max_tokens=max_tokens, concurrency=concurrency, timeout_s=timeout_s
        )
    peer = Peer(
        base,
        model=MODEL,
        concurrency=concurrency,
        max_tokens=max_tokens,
        rpm=limits.get("rpm"),
        tpm=limits.get("tpm"),
        timeout_s=timeout_s,
    )
    return asyncio.run(peer.run(texts))


def limited(
    name: str,
    workdir: Path,
    server_args: list[str],
    texts: list[str],
    *,
    limit_per_s: float,
    ideal_s: float,
    max_tokens: int,
    engine_limits: dict[str, Any],
) -> list[Row]:
    rows = []
    for client in CLIENTS:
        with fakellm(*server_args) as base:
            m = run_client(
                client,
                workdir,
                base,
                texts,
                max_tokens=max_tokens,
                limits=engine_limits,
                concurrency=BASELINE_CONCURRENCY,
            )
            s = stats(base)
        rate = steady_rate(m["times"])
        rows.append(
            Row(
                name,
                client,
                len(texts),
                m["ok"],
                m["failed"],
                m["lost"],
                m["wall"],
                ideal_s,
                rate / limit_per_s if rate else None,
                s["rate_limited"] / max(1, s["attempts"]),
            )
        )
    return rows


def physical_best_s(count: float, per_s: float, latency_s: float) -> float:
    """Wall time of a perfect client: a full server bucket at once, the rest at the limit."""
    return max(0.0, count - per_s * SERVER_BURST_S) / per_s + latency_s


def scenario_rpm(workdir: Path, scale: float) -> list[Row]:
    n = int(3000 * scale)
    return limited(
        "rpm-bound 3000 rpm, 200 ms",
        workdir,
        ["--rpm", "3000", "--latency-ms", "200"],
        prompts(n, varied=False),
        limit_per_s=50.0,
        ideal_s=physical_best_s(n, 50.0, 0.2),
        max_tokens=64,
        engine_limits={"rpm": 3000},
    )


def scenario_tpm(workdir: Path, scale: float) -> list[Row]:
    from promptlab.providers.tokens import estimate_prompt_tokens

    n = int(1200 * scale)
    tpm, max_tokens = 200_000, 100
    texts = prompts(n, varied=True)
    cost = sum(estimate_prompt_tokens([{"role": "user", "content": t}]) + max_tokens for t in texts)
    limit_per_s = n / (cost / tpm * 60)  # requests/s the token limit allows, on average
    return limited(
        "tpm-bound 200k tpm, varied prompts",
        workdir,
        ["--tpm", str(tpm), "--latency-ms", "200"],
        texts,
        limit_per_s=limit_per_s,
        ideal_s=physical_best_s(cost, tpm / 60, 0.2),
        max_tokens=max_tokens,
        engine_limits={"tpm": tpm},
    )


def scenario_faults(workdir: Path, scale: float) -> list[Row]:
    n = int(2000 * scale)
    args = ["--fail-rate", "0.05", "--timeout-rate", "0.01", "--latency-ms", "50"]
    texts = prompts(n, varied=False)
    rows = []
    for client in CLIENTS:
        with fakellm(*args) as base:
            m = run_client(
                client,
                workdir,
                base,
                texts,
                max_tokens=32,
                limits={"concurrency": 64},
                concurrency=64,
                timeout_s=FAULT_TIMEOUT_S,
                engine_retry={"timeout_s": FAULT_TIMEOUT_S, "backoff_base_s": 0.1},
            )
            s = stats(base)
        note = f"server 5xx {s['server_errors']}, timeouts {s['timeouts']}"
        rows.append(
            Row(
                "faults 5% 5xx, 1% timeouts",
                client,
                n,
                m["ok"],
                m["failed"],
                m["lost"],
                m["wall"],
                None,
                None,
                None,
                note,
            )
        )
    return rows


def scenario_rpmfaults(workdir: Path, scale: float) -> list[Row]:
    n = int(2000 * scale)
    return limited(
        "rpm-bound 6000 rpm, 5% 5xx, 50 ms",
        workdir,
        ["--rpm", "6000", "--fail-rate", "0.05", "--latency-ms", "50"],
        prompts(n, varied=False),
        limit_per_s=100.0,
        ideal_s=physical_best_s(n * 1.05, 100.0, 0.05),  # 5% of requests are re-sent
        max_tokens=64,
        engine_limits={"rpm": 6000},
    )


#: Share of the key's limits another client takes in the shared-key scenarios.
SHARED_LOAD = 0.5


def shared_key(
    name: str,
    workdir: Path,
    server_args: list[str],
    texts: list[str],
    *,
    limit_per_s: float,
    latency_s: float,
    max_tokens: int,
    engine_limits: dict[str, Any],
    engine_retry: dict[str, Any] | None = None,
    timeout_s: float = 600.0,
) -> list[Row]:
    """A key another client uses too (limits are per organization): the limit headers say
    more than this caller gets, so it sees `remaining: 0` on 200s and 429s whose reset
    header is the time to a *full* bucket (10 s) and whose retry-after is exact (ms).

    The physical best is per client, from what the server admitted for it (faults re-sent
    included): a full bucket at once, the rest at the caller's share of the limit.
    """
    net_per_s = limit_per_s * (1 - SHARED_LOAD)
    rows = []
    for client in CLIENTS:
        with fakellm(*server_args, "--shared-load", str(SHARED_LOAD)) as base:
            m = run_client(
                client,
                workdir,
                base,
                texts,
                max_tokens=max_tokens,
                limits=engine_limits,
                concurrency=BASELINE_CONCURRENCY,
                timeout_s=timeout_s,
                engine_retry=engine_retry,
            )
            s = stats(base)
        admitted = s["attempts"] - s["rate_limited"]
        ideal = max(0.0, admitted - limit_per_s * SERVER_BURST_S) / net_per_s + latency_s
        rate = steady_rate(m["times"])
        share = f"{ideal / m['wall']:.0%} of physical best" if not m["failed"] else "gave up"
        rows.append(
            Row(
                name,
                client,
                len(texts),
                m["ok"],
                m["failed"],
                m["lost"],
                m["wall"],
                ideal,
                rate / net_per_s if rate else None,
                s["rate_limited"] / max(1, s["attempts"]),
                f"{share}; server 5xx {s['server_errors']}, timeouts {s['timeouts']}",
            )
        )
    return rows


def scenario_shared_rpm(workdir: Path, scale: float) -> list[Row]:
    n = int(3000 * scale)
    return shared_key(
        "shared key 6000 rpm (half ours), 200 ms",
        workdir,
        ["--rpm", "6000", "--latency-ms", "200"],
        prompts(n, varied=False),
        limit_per_s=100.0,
        latency_s=0.2,
        max_tokens=64,
        engine_limits={"rpm": 6000},
    )


def scenario_shared_faults(workdir: Path, scale: float) -> list[Row]:
    n = int(3000 * scale)
    args = ["--rpm", "6000", "--latency-ms", "50", "--fail-rate", "0.05", "--timeout-rate", "0.01"]
    return shared_key(
        "shared key 6000 rpm, 5% 5xx, 1% t/o",
        workdir,
        args,
        prompts(n, varied=False),
        limit_per_s=100.0,
        latency_s=0.05,
        max_tokens=64,
        engine_limits={"rpm": 6000},
        engine_retry={"timeout_s": FAULT_TIMEOUT_S, "backoff_base_s": 0.1},
        timeout_s=FAULT_TIMEOUT_S,
    )


def scenario_overconfigured(workdir: Path, scale: float) -> list[Row]:
    n = int(3000 * scale)
    texts = prompts(n, varied=False)
    with fakellm("--rpm", "3000", "--latency-ms", "200") as base:
        m = run_engine(workdir, base, texts, max_tokens=64, limits={"rpm": 3600})
        s = stats(base)
    throttles = sorted(m["throttle_times"])
    converge = 0.0
    for i, t in enumerate(throttles):  # the last 429 followed by a quiet window
        nxt = throttles[i + 1] if i + 1 < len(throttles) else None
        if nxt is None or nxt - t >= CONVERGE_QUIET_S:
            converge = t
            break
    after = [t for t in m["times"] if t - m["start"] > converge]
    rate_after = steady_rate(after) or 0.0
    note = f"converged after {converge:.1f} s; {rate_after / 50.0:.1%} of limit after"
    return [
        Row(
            "client 20% over (3600 vs 3000 rpm)",
            "engine",
            n,
            m["ok"],
            m["failed"],
            m["lost"],
            m["wall"],
            n / 50.0,
            rate_after / 50.0,
            s["rate_limited"] / max(1, s["attempts"]),
            note,
        )
    ]


def scenario_ceiling(workdir: Path, scale: float) -> list[Row]:
    """Full engine (persistence on) against a bare aiohttp loop and the bare SDK."""
    n = int(6000 * scale)
    texts = prompts(n, varied=False)
    with fakellm() as base:
        bare = bare_aiohttp(base, n, 256)
    with fakellm() as base:
        lean = run_engine(
            workdir, base, texts, max_tokens=16, limits={"concurrency": 256}, lean=True
        )
    with fakellm() as base:
        sdk = run_baseline(base, texts, max_tokens=16, concurrency=256)
    with fakellm() as base:
        sdk_aio = run_baseline(base, texts, max_tokens=16, concurrency=256, aiohttp_transport=True)
    with fakellm() as base:
        full = run_engine(workdir, base, texts, max_tokens=16, limits={"concurrency": 256})
    lean_rps, sdk_rps, aio_rps, full_rps = (m["ok"] / m["wall"] for m in (lean, sdk, sdk_aio, full))
    return [
        Row(
            "ceiling: no limits, 0 ms, conc 256",
            "engine",
            n,
            lean["ok"],
            lean["failed"],
            lean["lost"],
            lean["wall"],
            None,
            None,
            None,
            f"bench's bare aiohttp provider: {lean_rps:.0f} req/s stored vs bare aiohttp loop "
            f"{bare:.0f} req/s = {lean_rps / bare:.0%}",
        ),
        Row(
            "ceiling: no limits, 0 ms, conc 256",
            "engine",
            n,
            full["ok"],
            full["failed"],
            full["lost"],
            full["wall"],
            None,
            None,
            None,
            f"shipped default (lean HTTP) adapter: {full_rps:.0f} req/s stored = "
            f"{full_rps / bare:.0%} of bare aiohttp, {full_rps / aio_rps:.0%} of the bare SDK",
        ),
        Row(
            "ceiling: no limits, 0 ms, conc 256",
            "baseline",
            n,
            sdk_aio["ok"],
            sdk_aio["failed"],
            0,
            sdk_aio["wall"],
            None,
            None,
            None,
            f"AsyncOpenAI (aiohttp transport) + semaphore: {aio_rps:.0f} req/s, nothing stored",
        ),
        Row(
            "ceiling: no limits, 0 ms, conc 256",
            "baseline",
            n,
            sdk["ok"],
            sdk["failed"],
            0,
            sdk["wall"],
            None,
            None,
            None,
            f"AsyncOpenAI (default httpx2) + semaphore: {sdk_rps:.0f} req/s, nothing stored",
        ),
    ]


def scenario_crash(workdir: Path, scale: float) -> list[Row]:
    n = int(3000 * scale)
    dataset = write_dataset(workdir, prompts(n, varied=False))
    db = workdir / "crash.duckdb"
    with fakellm("--latency-ms", "50") as base:
        spec_path = workdir / "crash.yaml"
        spec = spec_for(dataset, base, max_tokens=32, limits={"concurrency": 32}, retry={})
        spec_path.write_text(yaml.safe_dump(spec))
        cmd = [sys.executable, "-m", "promptlab", "--db", str(db)]
        child = subprocess.Popen(
            [*cmd, "run", str(spec_path), "--quiet"], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        run_id = child.stdout.readline().split()[1]
        while stats(base)["successes"] < n // 2:
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait()
        t0 = time.monotonic()
        subprocess.run([*cmd, "resume", run_id, "--quiet"], check=True, capture_output=True)
        wall = time.monotonic() - t0
        s = stats(base)
    from promptlab.store import Store

    with Store(db) as store, store.read() as cur:
        row = cur.execute(
            "SELECT count(DISTINCT idempotency_key), count(*), "
            "count(*) FILTER (WHERE status = 'succeeded') FROM results WHERE run_id = ?",
            [run_id],
        ).fetchone()
    assert row is not None
    lost, dup_rows = n - int(row[0]), int(row[1]) - int(row[0])
    note = (
        f"store: {dup_rows} duplicate final rows; server: {s['duplicate_completions']} "
        f"re-sent in flight at the kill (no stored result was re-sent)"
    )
    return [
        Row(
            "crash: kill -9 at ~50%, resume",
            "engine",
            n,
            int(row[2]),
            n - int(row[2]),
            lost,
            wall,
            None,
            None,
            None,
            note,
        )
    ]


def scenario_million(workdir: Path, scale: float, run_s: float = 30.0) -> list[Row]:
    """Plan 1,000,000 items, run for a while, cancel; peak RSS of that process."""
    n = int(1_000_000 * scale)
    dataset = workdir / "million.csv"
    with dataset.open("w") as handle:
        handle.write("text\n")
        for i in range(n):
            handle.write(f"row number {i}\n")
    db = workdir / "million.duckdb"
    with fakellm() as base:
        spec_path = workdir / "million.yaml"
        spec = spec_for(dataset, base, max_tokens=16, limits={"concurrency": 64}, retry={})
        spec_path.write_text(yaml.safe_dump(spec))
        t0 = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-m", "promptlab", "--db", str(db), "run", str(spec_path), "--quiet"],
            stdout=subprocess.PIPE,
            text=True,
        )
        while stats(base)["successes"] == 0:
            time.sleep(0.1)
        planned_s = time.monotonic() - t0
        time.sleep(run_s)
        sent = stats(base)["successes"]
        child.send_signal(signal.SIGINT)  # cancel: every open item gets its final row
        _, _, usage = os.wait4(child.pid, 0)  # this child's own peak, not the servers'
        child.returncode = 0
    peak_mb = usage.ru_maxrss / 1024
    note = (
        f"peak RSS {peak_mb:.0f} MB; planned in {planned_s:.0f} s; {sent} sent in {run_s:.0f} s, "
        f"then cancelled"
    )
    return [
        Row(
            f"{n:,} planned items",
            "engine",
            n,
            sent,
            0,
            0,
            time.monotonic() - t0,
            None,
            None,
            None,
            note,
        )
    ]


SCENARIOS = {
    "rpm": scenario_rpm,
    "tpm": scenario_tpm,
    "faults": scenario_faults,
    "rpmfaults": scenario_rpmfaults,
    "shared": scenario_shared_rpm,
    "sharedfaults": scenario_shared_faults,
    "over": scenario_overconfigured,
    "ceiling": scenario_ceiling,
    "crash": scenario_crash,
    "million": scenario_million,
}


def print_table(rows: list[Row]) -> None:
    head = (
        f"{'scenario':<36} {'client':<8} {'reqs':>7} {'ok':>7} {'failed':>6} {'lost':>4} "
        f"{'wall s':>7} {'ideal s':>7} {'steady/limit':>12} {'429 share':>9}  note"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        ideal = f"{r.ideal_s:.1f}" if r.ideal_s is not None else "-"
        steady = f"{r.steady_share:.1%}" if r.steady_share is not None else "-"
        share = f"{r.share_429:.2%}" if r.share_429 is not None else "-"
        print(
            f"{r.scenario:<36} {r.client:<8} {r.requests:>7} {r.ok:>7} {r.failed:>6} {r.lost:>4} "
            f"{r.wall_s:>7.1f} {ideal:>7} {steady:>12} {share:>9}  {r.note}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply request counts")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(SCENARIOS)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="promptlab-bench-") as tmp:
        for name in chosen:
            workdir = Path(tmp) / name
            workdir.mkdir()
            print(f"... {name}", file=sys.stderr, flush=True)
            rows += SCENARIOS[name](workdir, args.scale)
    print_table(rows)


if __name__ == "__main__":
    main()
