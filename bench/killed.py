"""What a SIGKILL costs: answers kept, requests sent again; and what the answer log costs.

    PYTHONPATH=. .venv/bin/python bench/killed.py                      # both parts
    PYTHONPATH=. .venv/bin/python bench/killed.py --only kill --items 4000
    PYTHONPATH=. .venv/bin/python bench/killed.py --only throughput --rounds 6

kill: a real `promptlab batch` child against fakellm (in this process, on loopback,
LATENCY_MS per answer, CONCURRENCY requests at a time) is SIGKILLed once the server has
answered half the requests, then `promptlab resume`d to the end, once with the answer
log on and once with it off (PROMPTLAB_ANSWER_LOG=0: how main was), each on a fresh
server and database. The server records every request's idempotency key, so the bench
counts, per mode: the answers the server gave before the kill, the results stored once
the database is opened again (the killed process's log folded in), the requests that
were in flight at the kill (sent, no answer kept), the requests the resume sent again,
and those answered twice. With the log on it asserts that nothing answered and stored
is sent again and that what is sent again is at most what was in flight at the kill.

throughput: the ceiling scenario of bench/executor.py (fakellm as a subprocess, no
limits, 0 ms latency, concurrency 256, the default adapter), like bench/audit.py: runs
with the log on and off alternately, each in a fresh interpreter after an uncounted
warm-up run; prints each run, the medians, their ratio and the ratio round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from executor import fakellm, prompts, spec_for, write_dataset  # bench/executor.py

ROOT = Path(__file__).resolve().parent.parent
LATENCY_MS = 50
CONCURRENCY = 64
#: The request header carrying each item's idempotency key (a batch line's custom_id).
REQUEST_ID = "x-client-request-id"


# ---- kill at 50% ----------------------------------------------------------------------


def requests_file(path: Path, n: int) -> Path:
    with path.open("w") as handle:
        for i in range(n):
            body = {
                "model": "gpt-4o-mini",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": f"Question number {i}?"}],
            }
            line = {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions"}
            handle.write(json.dumps({**line, "body": body}) + "\n")
    return path


def promptlab(db: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "promptlab", "--db", str(db), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def stored_ids(db: Path, run_id: str) -> set[str]:
    from promptlab.store import Store

    with Store(db) as store, store.read() as cur:
        rows = cur.execute(
            "SELECT rr.row_values FROM results r JOIN run_rows rr ON rr.run_id = r.run_id "
            "AND rr.row_index = r.row_index WHERE r.run_id = ? AND r.status = 'succeeded'",
            [run_id],
        ).fetchall()
    return {json.loads(row)["custom_id"] for (row,) in rows}


def sent(server: Any) -> Counter[str]:
    return Counter(r["headers"].get(REQUEST_ID) for r in server.requests())


def kill_once(workdir: Path, n: int, log_on: bool) -> dict[str, Any]:
    """One killed and resumed batch; what the server and the store saw."""
    from promptlab.fakellm.server import FakeLLMConfig, serve_in_thread

    config = FakeLLMConfig(port=0, latency_ms=LATENCY_MS, record_requests=3 * n)
    with serve_in_thread(config) as server:
        providers = workdir / f"providers-{log_on}.yaml"
        endpoint = {
            "kind": "openai",
            "base_url": server.openai_base_url,
            "concurrency": CONCURRENCY,
        }
        providers.write_text(yaml.safe_dump({"endpoints": {"fake": endpoint}}))
        env = {
            **os.environ,
            "PROMPTLAB_PROVIDERS": str(providers),
            "PROMPTLAB_ANSWER_LOG": "1" if log_on else "0",
        }
        db = workdir / f"killed-{log_on}.duckdb"
        requests = requests_file(workdir / "requests.jsonl", n)
        child = promptlab(db, env, "batch", str(requests), "--endpoint", "fake", "--quiet")
        assert child.stdout is not None
        run_id = child.stdout.readline().split()[1]
        while server.stats()["successes"] < n // 2:
            assert child.poll() is None, "the batch ended before the kill"
            time.sleep(0.002)
        child.send_signal(signal.SIGKILL)
        child.wait()
        answered_at_kill = server.stats()["successes"]
        while server.stats()["in_flight"]:  # requests of the dead client, ending
            time.sleep(0.01)
        answered = server.stats()["successes"]
        before = sent(server)
        # Any command opening the database folds what the killed process logged.
        promptlab(db, env, "status", run_id).wait()
        kept = stored_ids(db, run_id)
        resumed = promptlab(db, env, "resume", run_id, "--quiet")
        resumed.wait()
        stats = server.stats()
        after = sent(server) - before
    resent = set(after) & set(before)
    return {
        "mode": "log on" if log_on else "log off",
        "answered at the kill": answered_at_kill,
        "answered by the server": answered,
        "results stored": len(kept),
        "in flight at the kill": len(before) - len(kept),
        "re-sent on resume": len(resent),
        "answered twice": stats["duplicate_completions"],
        "taken in, then lost (>=)": max(0, len(resent) - CONCURRENCY),
        "stored, sent again": len(resent & kept),
        "resume exit": resumed.returncode,
        "complete": stats["successes"] - stats["duplicate_completions"] == n,
    }


def kill_part(n: int) -> None:
    print(f"kill at 50%: {n} requests, {LATENCY_MS} ms each, concurrency {CONCURRENCY}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for log_on in (True, False):
            rows.append(kill_once(Path(tmp), n, log_on))
    keys = list(rows[0])
    width = max(map(len, keys))
    for key in keys:
        values = "  ".join(
            f"{row[key]:>10.2f}" if isinstance(row[key], float) else f"{row[key]!s:>10}"
            for row in rows
        )
        print(f"  {key:<{width}}  {values}")
    on = rows[0]
    assert on["resume exit"] == 0 and on["complete"]
    assert on["stored, sent again"] == 0, "an answer stored before the kill was sent again"
    # At most CONCURRENCY requests are in flight at once: re-sending more means answers
    # the engine had taken in (their slots used again) were lost.
    assert on["re-sent on resume"] <= min(on["in flight at the kill"], CONCURRENCY)


# ---- throughput with the log on and off --------------------------------------------------


def run_once(workdir: Path, base: str, texts: list[str], log_on: bool) -> dict[str, float]:
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
    settings = replace(Settings.from_env(), answer_log=log_on)
    db = workdir / f"ceiling-{time.monotonic_ns()}.duckdb"
    with Store(db) as store, Engine(store, settings=settings, on_run_ended=run_ended) as engine:
        t0, cpu0 = time.monotonic(), time.process_time()
        run_id = engine.submit(spec)
        final = engine.wait(run_id)
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        stats = engine.writer_stats()
    return {
        "rate": final.succeeded / wall,
        "cpu": cpu / len(texts) * 1e6,
        "lines": stats.logged_lines,
        "syncs": stats.log_syncs,
    }


def child(mode: str, n: int) -> None:
    texts = prompts(n, varied=False)
    with tempfile.TemporaryDirectory() as tmp, fakellm() as base:
        run_once(Path(tmp), base, texts[:500], mode == "on")  # warm-up: not counted
        got = run_once(Path(tmp), base, texts, mode == "on")
    print(json.dumps(got))


def measure(mode: str, n: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--items", str(n)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def log_cost_us(n: int = 50_000) -> float:
    """CPU µs (every thread: the syncer's fdatasyncs too) the log itself takes per item:
    the three lines of an audited item (attempt, result, trace event), a seal and a drop
    per 1,000 items as the writer's commits do, with realistic rows."""
    from datetime import UTC, datetime

    from promptlab.audit.chain import AuditDraft
    from promptlab.engine.record.answerlog import AnswerLog
    from promptlab.records import AttemptRow, FinalRow

    now = datetime.now(UTC)
    attempt = AttemptRow("k", "run_x", 1, now, now, "ok", None, 200, None, 0.0, None, None, 12.5)
    final = FinalRow(
        key="k",
        run_id="run_x",
        seq=1,
        row_index=0,
        variant="v",
        repeat=0,
        status="succeeded",
        prompt_version_id="pv",
        endpoint="e",
        model="m",
        params={"max_tokens": 16},
        attempts=1,
        finished_at=now,
        output_text="an answer of some length " * 8,
        input_tokens=10,
        output_tokens=40,
        finish_reason="stop",
        model_version="m-1",
        latency_ms=12.0,
        cost_usd=1e-4,
        check_status="no_schema",
    )
    payload = {"prompt_sha256": "ab" * 32, "attempt_sha256": "cd" * 32, "status": "succeeded"}
    draft = AuditDraft("run:run_x", "result", "k/final/1", now, payload, run_id="run_x")
    with tempfile.TemporaryDirectory() as tmp:
        log = AnswerLog(Path(tmp))
        cpu0 = time.process_time()
        for i in range(n):
            log.attempt(attempt)
            log.final(final, draft)
            if i % 1000 == 999:
                log.drop(log.seal())
        log.close(keep=False)
        return (time.process_time() - cpu0) / n * 1e6


def throughput_part(n: int, rounds: int) -> None:
    rates: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    for round_no in range(rounds):
        for mode in ("off", "on") if round_no % 2 == 0 else ("on", "off"):
            got = measure(mode, n)
            rates[mode].append(got["rate"])
            cpus[mode].append(got["cpu"])
            print(
                f"round {round_no + 1} log {mode:3s}: {got['rate']:6.0f} items/s, "
                f"{got['cpu']:5.0f} CPU µs/item, {got['lines']:.0f} lines logged in "
                f"{got['syncs']:.0f} fdatasyncs",
                flush=True,
            )
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    cpu_off, cpu_on = statistics.median(cpus["off"]), statistics.median(cpus["on"])
    print(f"ceiling, {n} items, conc 256, 0 ms (medians of {rounds}):")
    print(f"  log off {off:6.0f} items/s, {cpu_off:4.0f} CPU µs/item")
    print(f"  log on  {on:6.0f} items/s, {cpu_on:4.0f} CPU µs/item ({cpu_on - cpu_off:+.0f})")
    paired = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
    each = ", ".join(f"{r:.0%}" for r in paired)
    print(f"throughput log on / off = {on / off:.1%}; per round: {each}, ")
    print(f"  median of the rounds {statistics.median(paired):.1%}")
    cost = log_cost_us()
    print(
        f"the log alone: {cost:.1f} CPU µs per item, {cost / cpu_off:.1%} of the "
        f"engine's {cpu_off:.0f} CPU µs per item with the log off"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["kill", "throughput"])
    parser.add_argument("--items", type=int, default=4000, help="requests of the kill part")
    parser.add_argument("--ceiling-items", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.items)
        return
    if args.only in (None, "kill"):
        kill_part(args.items)
    if args.only in (None, "throughput"):
        throughput_part(args.ceiling_items, args.rounds)


if __name__ == "__main__":
    main()
