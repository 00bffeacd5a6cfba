"""What the response cache saves: a temperature-0 spec run, then run again with the cache.

    .venv/bin/python bench/cache.py                    # 800 rows, simulated latency
    .venv/bin/python bench/cache.py --rows 2000 --latency-ms 0

Starts a `promptlab fakellm` on loopback (its `/_stats` counts what reaches it; with no
`--latency-ms` it waits the simulated model's own latency), and runs one spec twice on a
fresh database through the shipped engine and the OpenAI adapter, `cache: readwrite`,
temperature 0, concurrency 32, priced at gpt-4o-mini's list price. Prints, side by
side, the requests each run sent, the answers it took from the cache, its cost and its
wall time (submit to end). Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from promptlab.config import Settings
from promptlab.fakellm.server import FakeLLMConfig, RunningServer, serve_in_thread
from promptlab.workbench import Workbench

SPEC = {
    "name": "cache bench",
    "cache": "readwrite",
    "variants": [
        {
            "name": "triage",
            "messages": [
                {"role": "system", "content": "Label the ticket: billing, bug or other."},
                {"role": "user", "content": "{{ text }}"},
            ],
            "model": "bench:gpt-4o-mini",
            "params": {"temperature": 0, "max_tokens": 60},
        }
    ],
}


def setup(folder: Path, server: RunningServer, rows: int) -> Path:
    """The providers file (the endpoint, its price), the dataset and the spec."""
    providers = folder / "providers.yaml"
    endpoint = {
        "kind": "openai",
        "base_url": server.openai_base_url,
        "api_key_env": "BENCH_KEY",
        "concurrency": 32,
        "models": {
            "gpt-4o-mini": {
                "input_per_mtok": 0.15,
                "output_per_mtok": 0.60,
                "context_window": 128_000,
            }
        },
    }
    providers.write_text(yaml.safe_dump({"endpoints": {"bench": endpoint}}))
    os.environ.update(PROMPTLAB_PROVIDERS=str(providers), BENCH_KEY="sk-bench-not-a-key")
    dataset = folder / "tickets.csv"
    dataset.write_text(
        "text\n" + "".join(f"ticket {i}: my invoice {i % 37} is wrong\n" for i in range(rows))
    )
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "dataset": str(dataset)}))
    return spec


def one_run(wb: Workbench, spec: Path, server: RunningServer) -> dict[str, float]:
    before = int(server.stats()["attempts"])
    t0 = time.perf_counter()
    run_id = wb.runs.start(wb.runs.load_spec(spec))
    progress = wb.runs.wait(run_id)
    wall = time.perf_counter() - t0
    assert progress.status == "completed", progress.reason
    summary = wb.runs.view(run_id).summary
    return {
        "requests sent": int(server.stats()["attempts"]) - before,
        "answers from the cache": summary.cache_hits,
        "cost $": summary.cost_usd,
        "wall time s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=800)
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=None,
        help="a fixed latency per request (default: the simulated model's own)",
    )
    args = parser.parse_args()
    latency = {"latency_ms": args.latency_ms} if args.latency_ms is not None else {}
    config = FakeLLMConfig(port=0, sim_latency=args.latency_ms is None, **latency)
    with tempfile.TemporaryDirectory() as tmp, serve_in_thread(config) as server:
        folder = Path(tmp)
        spec = setup(folder, server, args.rows)
        settings = Settings.from_env(
            {
                **os.environ,
                "PROMPTLAB_DB": str(folder / "bench.duckdb"),
                "PROMPTLAB_AUTHOR": "bench",
            }
        )
        with Workbench.open(settings) as wb:
            first = one_run(wb, spec, server)
            again = one_run(wb, spec, server)
    print(f"{args.rows} rows, temperature 0, cache: readwrite, concurrency 32")
    print(f"{'':<24}{'first run':>12}{'rerun':>12}")
    digits = {"cost $": 4, "wall time s": 2}
    for name in first:
        places = digits.get(name, 0)
        print(f"{name:<24}{first[name]:>12.{places}f}{again[name]:>12.{places}f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
