"""`promptlab batch` beside a plain aiohttp client, each a process timed from start to exit.

    .venv/bin/python bench/wire.py                        # 5,000 requests, 3 rounds
    .venv/bin/python bench/wire.py --rounds 5 --before /tmp/old-tree
    .venv/bin/python bench/wire.py --requests 2000 --profile /tmp/batch.prof

The no-limit scenario: one `promptlab fakellm` subprocess (no rate limits, 0 ms latency)
serves a file of OpenAI Batch input lines. Each round runs, in turn (the order rotates
from round to round):
- `python -m promptlab --db FRESH batch FILE --base-url URL --quiet --concurrency N`,
- `python bench/wire.py --as-peer FILE URL` (bench/peer.py: aiohttp + aiolimiter +
  tenacity under a semaphore of the same N, nothing stored) over the same file,
- with `--before DIR`, the same `promptlab batch` from another source tree (an older
  commit unpacked there: `git archive COMMIT | tar -x -C DIR`),
- with `--served`, the same `promptlab batch` on a database a `promptlab serve` owns
  (started once, warm): the command then only posts the file and follows the run,
each timed from just before the process is started to its exit, after one untimed run
of each (the file cache; the bytecode cache, kept in a folder of the bench's own as an
installed package keeps its .pyc files). Prints the medians: requests per second, the
ratio promptlab / peer (by wall time, and by fakellm's busy window: its first request to
its last answer), each process's CPU seconds (user + system, its threads included),
and the time from start to the first request (fakellm's `first_request_at`). Prints the
date and load average first: on a busy machine the figures move. Asserts nothing.

`--profile FILE` runs promptlab once more under cProfile (`python -m cProfile -o FILE`):
the main thread only (the engine's loop runs in its own thread).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
# bench/peer.py only: the peer's process imports what a plain client does (bench/
# executor.py, which the parent uses for fakellm, brings the OpenAI SDK).
from peer import Peer  # noqa: E402

ROOT = BENCH.parent
#: The model every request names (bench/executor.py's).
MODEL = "gpt-4o-mini"
#: What each request asks for: short answers, so the client's cost shows.
MAX_TOKENS = 16
#: promptlab's own default in flight per endpoint (engine/send/limiter.py DEFAULT_CONCURRENCY);
#: both clients get the same.
CONCURRENCY = 64


@dataclass
class Timing:
    wall_s: float
    cpu_s: float  # user + system of the process (all its threads)
    ok: int
    first_s: float | None  # process start to fakellm's first request
    busy_s: float | None  # fakellm's first request to its last answer


def write_requests(path: Path, n: int) -> None:
    """OpenAI Batch input lines, one short user message each (bench/executor.py's texts)."""
    from executor import prompts

    with path.open("w") as handle:
        for i, text in enumerate(prompts(n, varied=False)):
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": text}],
                "max_tokens": MAX_TOKENS,
            }
            line = {
                "custom_id": f"r{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": body,
            }
            handle.write(json.dumps(line) + "\n")


def as_peer(requests: Path, base: str, concurrency: int) -> None:
    """The peer's process: read the file, send every request, print how many succeeded."""
    texts = []
    for line in requests.read_text().splitlines():
        body = json.loads(line)["body"]
        texts.append(body["messages"][0]["content"])
    peer = Peer(base, model=MODEL, concurrency=concurrency, max_tokens=MAX_TOKENS)
    result = asyncio.run(peer.run(texts))
    print(json.dumps({"ok": result["ok"], "failed": result["failed"]}))


def stats(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/_stats") as resp:  # noqa: S310 - loopback
        data: dict[str, Any] = json.loads(resp.read())
        return data


def reset(base: str) -> None:
    request = urllib.request.Request(f"{base}/_reset", method="POST")
    with urllib.request.urlopen(request):  # noqa: S310 - loopback
        pass


def timed(argv: list[str], base: str, env: dict[str, str]) -> Timing:
    """Run `argv` to its exit; wall and CPU time, and fakellm's view of its requests.

    It runs in the file's folder: `python -m` puts the working directory first on the
    path, which would shadow the tree PYTHONPATH names."""
    reset(base)
    started_at, t0 = time.time(), time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, cwd=env["BENCH_DIR"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    err = proc.stderr.read()  # until it exits (its stderr closes with it)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} exited {proc.returncode}: {err[-2000:]!r}")
    seen = stats(base)
    first, last = seen.get("first_request_at"), seen.get("last_answered_at")
    return Timing(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        ok=int(seen["successes"]),
        first_s=first - started_at if first else None,
        busy_s=last - first if first and last else None,
    )


@contextlib.contextmanager
def serving(db: Path, env: dict[str, str]) -> Iterator[None]:
    """`promptlab serve` owning `db` until the block ends (commands on `db` go through it)."""
    from executor import free_port

    port = free_port()
    argv = [sys.executable, "-m", "promptlab", "--db", str(db), "serve", "--port", str(port)]
    proc = subprocess.Popen(
        argv, env=env, cwd=env["BENCH_DIR"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health")  # noqa: S310
                break
            except urllib.error.HTTPError:
                break  # it answers (401 without a token): it is up
            except OSError:
                time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(30)


def clean_env(pycache: Path, tree: Path) -> dict[str, str]:
    """The user's environment minus what promptlab reads (keys, PROMPTLAB_*, OTEL_*), the
    source `tree` first on the path, and a bytecode cache as an installed package has."""
    drop = ("PROMPTLAB_", "OTEL_", "OPENAI_", "ANTHROPIC_", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(tree)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["BENCH_DIR"] = str(pycache.parent)
    return env


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def show(name: str, runs: list[Timing], n: int) -> tuple[float, float | None]:
    wall = statistics.median(r.wall_s for r in runs)
    busy = median([r.busy_s for r in runs])
    first = median([r.first_s for r in runs])
    cpu = statistics.median(r.cpu_s for r in runs)
    walls = ", ".join(f"{r.wall_s:.2f}" for r in runs)
    firsts = ", ".join(f"{r.first_s:.2f}" for r in runs if r.first_s is not None)
    print(
        f"{name:<10} {wall:6.2f} s [{walls}]  {n / wall:5.0f} req/s"
        f"  busy {busy or 0:5.2f} s ({n / busy if busy else 0:5.0f} req/s)"
        f"  cpu {cpu:5.2f} s  start->1st request {first or 0:.2f} s [{firsts}]"
    )
    return n / wall, n / busy if busy else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--before", type=Path, help="also run promptlab from this source tree")
    parser.add_argument("--served", action="store_true", help="also run it through a server")
    parser.add_argument("--profile", type=Path, help="also write a cProfile of one batch here")
    parser.add_argument("--as-peer", nargs=2, metavar=("FILE", "BASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.as_peer:
        as_peer(Path(args.as_peer[0]), args.as_peer[1], args.concurrency)
        return
    from executor import fakellm  # bench/executor.py: fakellm as a subprocess

    n = args.requests
    print(
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores"
    )
    print(
        f"no limits, 0 ms, {n} requests, concurrency {args.concurrency}, "
        f"{args.rounds} rounds (medians)"
    )
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        base = stack.enter_context(fakellm())
        requests = folder / "requests.jsonl"
        write_requests(requests, n)
        runs = 0

        def batch(tree: Path, db: Path | None = None) -> Callable[[], Timing]:
            def one() -> Timing:
                nonlocal runs
                runs += 1
                argv = [
                    sys.executable,
                    "-m",
                    "promptlab",
                    "--db",
                    str(db or folder / f"{runs}.duckdb"),
                    "batch",
                    str(requests),
                    "--base-url",
                    f"{base}/v1",
                    "--quiet",
                    "--concurrency",
                    str(args.concurrency),
                ]
                return timed(argv, base, clean_env(folder / "pycache", tree))

            return one

        def peer() -> Timing:
            argv = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--as-peer",
                str(requests),
                base,
                "--concurrency",
                str(args.concurrency),
            ]
            return timed(argv, base, clean_env(folder / "pycache", ROOT))

        clients: dict[str, Callable[[], Timing]] = {"promptlab": batch(ROOT), "peer": peer}
        if args.before:
            clients["before"] = batch(args.before.resolve())
        if args.served:
            served_db = folder / "served.duckdb"
            stack.enter_context(serving(served_db, clean_env(folder / "pycache", ROOT)))
            clients["served"] = batch(ROOT, served_db)
        for client in clients.values():  # untimed: file and bytecode caches
            client()
        measured: dict[str, list[Timing]] = {name: [] for name in clients}
        names = list(clients)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                timing = clients[name]()
                if timing.ok != n:
                    raise SystemExit(f"{name}: {timing.ok} of {n} succeeded")
                measured[name].append(timing)
        rates = {name: show(name, measured[name], n) for name in names}
        for name in names:
            if name == "peer":
                continue
            (wall, busy), (peer_wall, peer_busy) = rates[name], rates["peer"]
            by_busy = f"{busy / peer_busy:.2f}" if busy and peer_busy else "-"
            print(
                f"{name} / peer: {wall / peer_wall:.2f} by process wall time, "
                f"{by_busy} by fakellm's busy window"
            )
        if args.profile:
            argv = [
                sys.executable,
                "-m",
                "cProfile",
                "-o",
                str(args.profile),
                "-m",
                "promptlab",
                "--db",
                str(folder / "profile.duckdb"),
                "batch",
                str(requests),
                "--base-url",
                f"{base}/v1",
                "--quiet",
                "--concurrency",
                str(args.concurrency),
            ]
            timed(argv, base, clean_env(folder / "pycache", ROOT))
            print(f"profile: {args.profile} (python -m pstats)")


if __name__ == "__main__":
    main()
