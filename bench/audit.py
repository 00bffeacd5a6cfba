"""The audit trail's cost at the engine's ceiling: the same run with the audit on and off.

    PYTHONPATH=. .venv/bin/python bench/audit.py              # 6 rounds of 6,000 items each way
    PYTHONPATH=. .venv/bin/python bench/audit.py --rounds 5 --scale 2
    PYTHONPATH=. .venv/bin/python bench/audit.py --parts      # where the cost goes
    PYTHONPATH=. .venv/bin/python bench/audit.py --gc         # also with the collector untuned

The ceiling scenario of bench/executor.py (fakellm as a subprocess, no limits, 0 ms
latency, concurrency 256, persistence on, the shipped default adapter), run alternately
with `Settings.audit` on and off so drift hits both alike, each run in a fresh process
after an uncounted warm-up run. Prints each run, the median stored items/s of each,
their ratio, and the ratio round by round; asserts nothing.

`--parts` adds two runs per round that stop the audit part way, to say where its cost
goes: `payloads` builds every event on the engine loop and hands it to the writer,
which drops it; `chained` also numbers, redacts and hashes each batch in the writer,
and stores nothing. `on` minus `chained` is then the Arrow table and DuckDB's insert.

`--gc` adds both runs with `Settings.tune_gc` off (Python's default collector
threshold; see promptlab.engine.collector), to show what the tuning gives and the
audit's cost without it. Each run also prints how many collections it ran and the CPU
they took.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from executor import fakellm, prompts, spec_for, write_dataset  # bench/executor.py


def run_once(
    workdir: Path, base: str, texts: list[str], audit: bool, tune_gc: bool = True
) -> tuple[float, float, int]:
    """Items/s stored by one run, this process's CPU µs per item (every thread: the
    figure a busy machine disturbs least), and the audit events it wrote."""
    from promptlab.config import Settings
    from promptlab.engine import Engine, parse_spec
    from promptlab.evaluation.ended import run_ended
    from promptlab.store import Store

    spec = parse_spec(
        spec_for(
            write_dataset(workdir, texts),
            base,
            max_tokens=16,
            limits={"concurrency": 256},
            retry={},
        )
    )
    settings = replace(Settings.from_env(), audit=audit, tune_gc=tune_gc)
    db = workdir / f"audit-{time.monotonic_ns()}.duckdb"
    with Store(db) as store, Engine(store, settings=settings, on_run_ended=run_ended) as engine:
        t0, cpu0 = time.monotonic(), time.process_time()
        run_id = engine.submit(spec)
        final = engine.wait(run_id)
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        with store.read() as cur:
            (events,) = cur.execute("SELECT count(*) FROM audit_events").fetchall()[0]
    return final.succeeded / wall, cpu / len(texts) * 1e6, int(events)


def _dropped(tx: Any, drafts: Any, clean: Any = None, known: Any = None) -> dict[str, Any]:
    return {}


def _chained_only(tx: Any, drafts: Any, clean: Any = None, known: Any = None) -> dict[str, Any]:
    from promptlab.audit.chain import chain_drafts
    from promptlab.audit.redact import Redactor

    suspect = clean.suspects if isinstance(clean, Redactor) else None
    chain_drafts(drafts, {}, clean, suspect)
    return {}


@contextmanager
def writer_append(append: Callable[..., dict[str, Any]] | None) -> Iterator[None]:
    """Swap what the engine's writer does with a batch's trace events (None: store them)."""
    import promptlab.store.items as items

    stored = items.append_events
    if append is not None:
        items.append_events = append  # type: ignore[assignment]
    try:
        yield
    finally:
        items.append_events = stored


#: mode -> (audit on, what the writer does with the events (None: the real insert),
#: the collector tuned while the run goes)
MODES: dict[str, tuple[bool, Callable[..., dict[str, Any]] | None, bool]] = {
    "off": (False, None, True),
    "on": (True, None, True),
    "payloads": (True, _dropped, True),
    "chained": (True, _chained_only, True),
    "off-gc": (False, None, False),
    "on-gc": (True, None, False),
}
PARTS = ("payloads", "chained")
UNTUNED = ("off-gc", "on-gc")


@contextmanager
def collections() -> Iterator[dict[str, float]]:
    """Count the collector's passes in the body, and the CPU they took on the thread
    that ran them (the engine's, at the ceiling)."""
    seen = {"collections": 0, "gc_ms": 0.0}
    started = threading.local()

    def note(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            started.at = time.thread_time()
        else:
            seen["collections"] += 1
            seen["gc_ms"] += (time.thread_time() - started.at) * 1000

    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)


def child(mode: str, n: int) -> None:
    """One measured run in this (fresh) process, after an uncounted warm-up run: prints
    its items/s, CPU µs per item, events and collections as JSON for the parent."""
    texts = prompts(n, varied=False)
    audit, append, tune_gc = MODES[mode]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        with fakellm() as base, writer_append(append):
            # A process's first run pays one-time costs (imports; pyarrow imports pandas
            # at its first array, ~0.5 s): not counted.
            run_once(workdir, base, texts[:500], audit, tune_gc)
            with collections() as seen:
                rate, cpu, events = run_once(workdir, base, texts, audit, tune_gc)
    print(json.dumps({"rate": rate, "cpu": cpu, "events": events, **seen}))


def measure(mode: str, n: int) -> dict[str, float]:
    """`child` in a fresh interpreter: no run inherits another's heap or caches."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--items", str(n)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--parts", action="store_true", help="also the part-way modes")
    parser.add_argument("--gc", action="store_true", help="also with the collector untuned")
    parser.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--items", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.items or int(6000 * args.scale)
    if args.child:
        child(args.child, n)
        return
    modes = ["off", "on", *(PARTS if args.parts else ()), *(UNTUNED if args.gc else ())]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    for round_no in range(args.rounds):
        order = modes if round_no % 2 == 0 else modes[::-1]
        for mode in order:
            got = measure(mode, n)
            rates[mode].append(got["rate"])
            cpus[mode].append(got["cpu"])
            print(
                f"round {round_no + 1} {mode:8s}: {got['rate']:6.0f} items/s, "
                f"{got['cpu']:5.0f} CPU µs/item ({got['events']:.0f} events; "
                f"{got['collections']:.0f} collections, {got['gc_ms']:.0f} ms)",
                flush=True,
            )
    off, cpu_off = statistics.median(rates["off"]), statistics.median(cpus["off"])
    head = f"ceiling, {n} items, conc 256, 0 ms (medians of {args.rounds})"
    for mode in modes:
        rate, cpu = statistics.median(rates[mode]), statistics.median(cpus[mode])
        print(
            f"{head}: {mode:8s} {rate:6.0f} items/s ({rate / off:6.1%} of off), "
            f"{cpu:4.0f} CPU µs/item ({cpu - cpu_off:+4.0f})"
        )
    # Paired by round too: each round's on / off, so drift between rounds cancels.
    paired = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
    on, cpu_on = statistics.median(rates["on"]), statistics.median(cpus["on"])
    print(f"throughput on / off = {on / off:.1%} (target: at least 90%)")
    print(
        f"per round on / off: {', '.join(f'{r:.0%}' for r in paired)}; "
        f"median {statistics.median(paired):.1%}"
    )
    print(f"CPU per item on / off = {cpu_on / cpu_off:.1%} (at most 110%)")
    if args.gc:
        off_gc, on_gc = statistics.median(rates["off-gc"]), statistics.median(rates["on-gc"])
        print(
            f"collector untuned: on / off = {on_gc / off_gc:.1%}; tuned / untuned: "
            f"{off / off_gc:.1%} with the audit off, {on / on_gc:.1%} with it on"
        )


if __name__ == "__main__":
    main()
