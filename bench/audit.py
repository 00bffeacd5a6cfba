"""The audit trail's cost at the engine's ceiling: the same run with the audit on and off.

    PYTHONPATH=. .venv/bin/python bench/audit.py              # 3 rounds of 6,000 items each way
    PYTHONPATH=. .venv/bin/python bench/audit.py --rounds 5 --scale 2

The ceiling scenario of bench/executor.py (fakellm as a subprocess, no limits, 0 ms
latency, concurrency 256, persistence on, the shipped default adapter), run alternately
with `Settings.audit` on and off so drift hits both alike. Prints each run, the median
stored items/s of each, and their ratio; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from executor import fakellm, prompts, spec_for, write_dataset  # bench/executor.py


def run_once(workdir: Path, base: str, texts: list[str], audit: bool) -> tuple[float, float, int]:
    """Items/s stored by one run, this process's CPU µs per item (every thread: the
    figure a busy machine disturbs least), and the audit events it wrote."""
    from promptlab.config import Settings
    from promptlab.engine import Engine, parse_spec
    from promptlab.store import Store

    spec = parse_spec(
        spec_for(
            write_dataset(workdir, texts), base, max_tokens=16,
            limits={"concurrency": 256}, retry={},
        )
    )  # fmt: skip
    settings = replace(Settings.from_env(), audit=audit)
    db = workdir / f"audit-{time.monotonic_ns()}.duckdb"
    with Store(db) as store, Engine(store, settings=settings) as engine:
        t0, cpu0 = time.monotonic(), time.process_time()
        run_id = engine.submit(spec)
        final = engine.wait(run_id)
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        with store.read() as cur:
            (events,) = cur.execute("SELECT count(*) FROM audit_events").fetchall()[0]
    return final.succeeded / wall, cpu / len(texts) * 1e6, int(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    n = int(6000 * args.scale)
    texts = prompts(n, varied=False)
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for round_no in range(args.rounds):
            order = (False, True) if round_no % 2 == 0 else (True, False)
            for audit in order:
                with fakellm() as base:
                    rate, cpu, events = run_once(workdir, base, texts, audit)
                rates[audit].append(rate)
                cpus[audit].append(cpu)
                label = "on " if audit else "off"
                print(
                    f"round {round_no + 1} audit {label}: {rate:6.0f} items/s, "
                    f"{cpu:5.0f} CPU µs/item ({events} events)"
                )
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    cpu_on, cpu_off = statistics.median(cpus[True]), statistics.median(cpus[False])
    head = f"ceiling, {n} items, conc 256, 0 ms (medians of {args.rounds})"
    print(f"{head}: audit off {off:.0f} items/s, {cpu_off:.0f} CPU µs/item")
    print(f"{head}: audit on  {on:.0f} items/s, {cpu_on:.0f} CPU µs/item")
    print(f"throughput on / off = {on / off:.1%} (target: at least 90%)")
    print(f"CPU per item on / off = {cpu_on / cpu_off:.1%} (at most 110%)")


if __name__ == "__main__":
    main()
