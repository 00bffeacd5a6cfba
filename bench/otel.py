"""What OpenTelemetry export costs the engine: its no-limit ceiling with traces off and on.

    .venv/bin/python bench/otel.py                     # 6,000 requests, 3 rounds
    .venv/bin/python bench/otel.py --requests 2000 --rounds 1

Each round runs the same run twice against a fresh `promptlab fakellm` (no limits, 0 ms,
concurrency 256, persistence on, the shipped adapter): once with no OTEL_* variables,
once exporting every run, item and attempt span over OTLP/HTTP to a receiver on
loopback (a subprocess that reads and drops each batch). Prints requests/s stored for
both, side by side, and their ratio (median of the rounds). Asserts nothing.
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


def one_run(workdir: Path, n: int, otlp: str | None) -> float:
    """Requests/s stored of one no-limit run; traces exported to `otlp` when given."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(name, None)
    if otlp is not None:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp
    texts = engine_bench.prompts(n, varied=False)
    with engine_bench.fakellm() as base:
        measured = engine_bench.run_engine(
            workdir, base, texts, max_tokens=16, limits={"concurrency": 256}
        )
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return float(measured["ok"] / measured["wall"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    off: list[float] = []
    on: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, receiver() as otlp:
        for _ in range(args.rounds):  # alternated: the machine's load drifts for both
            off.append(one_run(Path(tmp), args.requests, None))
            on.append(one_run(Path(tmp), args.requests, otlp))
    print(f"no-limit ceiling, {args.requests} requests, {args.rounds} rounds (median):")
    print(f"  traces off: {statistics.median(off):8.0f} req/s  {[round(x) for x in off]}")
    print(f"  traces on:  {statistics.median(on):8.0f} req/s  {[round(x) for x in on]}")
    print(f"  on / off:   {statistics.median(on) / statistics.median(off):.2f}")


if __name__ == "__main__":
    main()
