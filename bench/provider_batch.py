"""A run sent live beside the same run sent through the Batch API, against fakellm.

    .venv/bin/python bench/provider_batch.py                      # 10,000 requests, 20 s delay
    .venv/bin/python bench/provider_batch.py --requests 2000 --delay 5 --rpm 6000

fakellm runs in this process's thread with a rate limit (`--rpm`, what the live run is
held to) and a batch processing delay (`--delay`, what every batch takes). Both runs are
`promptlab batch` of the same request file through the same engine, one with
`--provider-batch`: the table gives each its wall time, what it cost (the providers file
prices the model; a batch token costs half), requests sent live and batch lines, and the
ratios. Asserts nothing; prints the date and the machine's load beside the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from promptlab.cli import main  # noqa: E402
from promptlab.fakellm.server import FakeLLMConfig, serve_in_thread  # noqa: E402
from promptlab.store import Store  # noqa: E402

MODEL = "gpt-4o-mini"
PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.60, "context_window": 128_000}


def request_file(path: Path, n: int) -> Path:
    with path.open("w") as handle:
        for i in range(n):
            messages = [{"role": "user", "content": f"Summarize ticket {i}."}]
            body = {"model": MODEL, "max_tokens": 64, "temperature": 0, "messages": messages}
            line = {"custom_id": f"t{i}", "method": "POST", "url": "/v1/chat/completions"}
            handle.write(json.dumps({**line, "body": body}) + "\n")
    return path


def one_run(work: Path, requests: Path, batched: bool) -> tuple[float, float, int]:
    """(wall seconds, cost in USD, items succeeded) of one `promptlab batch` run."""
    db = work / ("batched.duckdb" if batched else "live.duckdb")
    args = ["--db", str(db), "batch", str(requests), "--endpoint", "fake", "--quiet"]
    if batched:
        args.append("--provider-batch")
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(args, standalone_mode=True)
    wall = time.perf_counter() - started
    with Store(db) as store, store.read() as cur:
        cost, ok = cur.execute(
            "SELECT coalesce(sum(cost_usd), 0), count(*) FILTER (status = 'succeeded') FROM results"
        ).fetchone()
    return wall, float(cost), int(ok)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=20.0, help="Seconds each batch takes.")
    parser.add_argument("--rpm", type=int, default=30_000, help="The live run's rate limit.")
    args = parser.parse_args()
    config = FakeLLMConfig(port=0, rpm=args.rpm, batch_delay_s=args.delay, record_requests=10)
    with tempfile.TemporaryDirectory() as tmp, serve_in_thread(config) as server:
        work = Path(tmp)
        endpoint = {
            "kind": "openai",
            "base_url": server.openai_base_url,
            "rpm": args.rpm,
            "models": {"*": PRICE},
            "batch": {"poll_s": 1.0},
        }
        (work / "providers.yaml").write_text(yaml.safe_dump({"endpoints": {"fake": endpoint}}))
        os.environ["PROMPTLAB_PROVIDERS"] = str(work / "providers.yaml")
        requests = request_file(work / "requests.jsonl", args.requests)
        live = one_run(work, requests, batched=False)
        after_live = server.stats()
        batched = one_run(work, requests, batched=True)
        stats = server.stats()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load {load}; {args.requests} requests, "
        f"fakellm rpm {args.rpm}, batch delay {args.delay:g} s"
    )
    print(
        f"{'run':<16}{'wall s':>9}{'cost $':>11}{'succeeded':>11}{'live calls':>12}"
        f"{'batch lines':>13}{'batches':>9}"
    )
    rows = (
        ("live", live, after_live["attempts"], 0, 0),
        (
            "provider batch",
            batched,
            stats["attempts"] - after_live["attempts"],
            stats["batch_lines_received"],
            stats["batches_created"],
        ),
    )
    for name, (wall, cost, ok), calls, lines, batches in rows:
        print(f"{name:<16}{wall:>9.1f}{cost:>11.4f}{ok:>11}{calls:>12}{lines:>13}{batches:>9}")
    print(f"batch / live: cost {batched[1] / live[1]:.2f}, wall time {batched[0] / live[0]:.2f}")


if __name__ == "__main__":
    main_bench()
