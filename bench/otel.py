"""What OpenTelemetry export costs the engine: its no-limit ceiling with traces off and on.

    .venv/bin/python bench/otel.py                     # 6,000 requests, 3 rounds
    .venv/bin/python bench/otel.py --requests 2000 --rounds 1

Each round runs the same run twice against a fresh `promptlab fakellm` (no limits, 0 ms,
concurrency 256, persistence on, the shipped adapter): once with no OTEL_* variables,
once exporting every run, item and attempt span over OTLP/HTTP to a receiver on
loopback (a subprocess that reads and drops each batch). Prints requests/s stored for
both, side by side, and their ratio (median of the rounds). Asserts nothing.

Beside them, the CPU time each run took (user + system, per 1,000 requests): the
engine's own process, its export child (python -m promptlab.observability.offload,
traces on) and fakellm. On a shared machine the rates move with its load; these move
less, and on a machine whose cores the engine and fakellm already fill, the ratio of
the totals (off / on) is about what the ratio of the ceilings can be.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import executor as engine_bench  # noqa: E402 - bench/executor.py, beside this script

RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def receiver() -> Iterator[str]:
    """A loopback OTLP/HTTP endpoint that accepts and drops what it is sent."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])
    try:
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the receiver did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def one_run(workdir: Path, n: int, otlp: str | None) -> tuple[float, float, float, float]:
    """Requests/s stored of one no-limit run, and the CPU seconds per 1,000 requests of
    this process (the engine), its export child and fakellm; traces exported to `otlp`
    when given."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(name, None)
    if otlp is not None:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp
    texts = engine_bench.prompts(n, varied=False)
    before = os.times()
    with engine_bench.fakellm() as base:
        measured = engine_bench.run_engine(
            workdir, base, texts, max_tokens=16, limits={"concurrency": 256}
        )
        closed = os.times()  # the engine closed: its export child was waited for
    after = os.times()  # fakellm was waited for
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)

    def children(a: os.times_result, b: os.times_result) -> float:
        return b.children_user - a.children_user + b.children_system - a.children_system

    own = closed.user - before.user + closed.system - before.system
    cpu = [x * 1000 / n for x in (own, children(before, closed), children(closed, after))]
    return float(measured["ok"] / measured["wall"]), cpu[0], cpu[1], cpu[2]


def row(name: str, runs: list[tuple[float, float, float, float]]) -> str:
    rates = [r[0] for r in runs]
    engine, child, fakellm = (statistics.median(r[i] for r in runs) for i in (1, 2, 3))
    cpu = f"engine {engine:.2f}, export child {child:.2f}, fakellm {fakellm:.2f}"
    rate = statistics.median(rates)
    return f"  {name} {rate:8.0f} req/s  {[round(x) for x in rates]}  cpu s/1k: {cpu}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    off: list[tuple[float, float, float, float]] = []
    on: list[tuple[float, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp, receiver() as otlp:
        for _ in range(args.rounds):  # alternated: the machine's load drifts for both
            off.append(one_run(Path(tmp), args.requests, None))
            on.append(one_run(Path(tmp), args.requests, otlp))
    print(f"no-limit ceiling, {args.requests} requests, {args.rounds} rounds (median):")
    print(row("traces off:", off))
    print(row("traces on: ", on))
    ratio = statistics.median(r[0] for r in on) / statistics.median(r[0] for r in off)
    cpu = [statistics.median(r[1] + r[2] + r[3] for r in runs) for runs in (off, on)]
    print(f"  on / off:   {ratio:.2f}  (CPU, all processes: off / on {cpu[0] / cpu[1]:.2f})")


if __name__ == "__main__":
    main()
