"""Runs on Celery workers (issue 25), side by side in one run against `promptlab fakellm`.

    PYTHONPATH=. .venv/bin/python bench/distributed.py            # every scenario
    PYTHONPATH=. .venv/bin/python bench/distributed.py --only rpm --items 200

A real redis-server and real `promptlab worker` processes (8 threads each) on loopback;
fakellm runs as its own process. Owners are `promptlab run` processes, each on its own
database. Prints one table per scenario; asserts nothing.

- rpm: fakellm limited to RPM requests a minute (a one-second bucket). Two owners at
  once, each pacing itself at the limit (as two teams' runs, or a server and a CLI, on
  one key would), first in process (two budgets), then on 1, 2 and 4 workers (one
  budget in Redis). The total should stay at the limit with at most 2% 429s.
- burst: fakellm limited to 3,000 requests a minute with a ten-second bucket (500 at
  once, then 50 a second), limits the run does not configure (learned from the
  headers): one owner of 2,000 items in process, then on 2 workers. The physical best
  is the full bucket at once, then the refill: (2,000 - 500) / 50 = 30 s of sending.
  Prints each one's rate beside that best and beside the in-process run, and its 429s.
- latency: no limits, 200 ms per answer, one owner with a wide concurrency: in process,
  then on 1, 2 and 4 workers; where it stops growing, and why.
- kill: 2 workers, 200 ms; kill -9 one worker at 30%, then the owner at 60% and
  `promptlab resume`: items recorded once, and the attempts fakellm answered twice.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import yaml

# bench/executor.py, beside this script: fakellm as a subprocess and its stats.
from executor import fakellm, stats

from tests.cluster_fixtures import RedisServer, Workers

WALL = re.compile(r"wall time ([0-9.]+) s")


def reset(base: str) -> None:
    request = urllib.request.Request(f"{base}/_reset", method="POST", data=b"")
    with urllib.request.urlopen(request):  # noqa: S310 - loopback
        pass


def spec_file(folder: Path, name: str, base: str, items: int, **endpoint: Any) -> Path:
    rows = folder / f"{name}.csv"
    rows.write_text("text\n" + "".join(f"row {i}\n" for i in range(items)))
    spec = {
        "name": name,
        "dataset": str(rows),
        "variants": [
            {
                "name": "v",
                "messages": [{"role": "user", "content": "Say {{ text }}"}],
                "model": "fake:gpt-4o-mini",
                "params": {"max_tokens": 16},
            }
        ],
        "endpoints": {"fake": {"kind": "openai", "base_url": f"{base}/v1", **endpoint}},
        "retry": {"timeout_s": 30},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def owner(
    folder: Path, spec: Path, broker: str, distributed: bool, db: str | None = None
) -> subprocess.Popen[str]:
    args = [
        sys.executable,
        "-m",
        "promptlab",
        "--db",
        db or str(folder / f"{spec.stem}.duckdb"),
        "run",
        str(spec),
        "--quiet",
        *(["--distributed"] if distributed else []),
    ]
    env = {**os.environ, "PROMPTLAB_BROKER_URL": broker}
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def finished(proc: subprocess.Popen[str]) -> float:
    """The run's wall time from its own summary (no interpreter start-up in it)."""
    out, err = proc.communicate(timeout=600)
    match = WALL.search(out)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f"the owner failed ({proc.returncode}): {out}{err}")
    return float(match.group(1))


@contextlib.contextmanager
def cluster(folder: Path, count: int) -> Iterator[Workers]:
    redis = RedisServer(folder)
    workers = Workers(redis.url, folder)
    try:
        if count:
            workers.start(count)
        yield workers
    finally:
        workers.stop()
        redis.stop()


def sending_time(base: str, procs: list[subprocess.Popen[str]]) -> float:
    """Seconds from fakellm's first answer to its last, sampled every 20 ms while the
    owners run (their interpreters' start-up is not sending time)."""
    first = last = None
    seen = 0
    while any(p.poll() is None for p in procs):
        now, answered = time.monotonic(), stats(base)["successes"]
        if answered and first is None:
            first = now
        if answered > seen:
            seen, last = answered, now
        time.sleep(0.02)
    return max((last or 0) - (first or 0), 0.001)


def rpm_scenario(folder: Path, rpm: int, items: int) -> None:
    print(f"\nrpm: two owners x {items} items, fakellm --rpm {rpm} --burst-s 1")
    print(f"{'where':<12} {'req/s':>7} {'of limit':>9} {'429s':>6} {'429 share':>10}")
    with fakellm("--rpm", str(rpm), "--burst-s", "1") as base:
        for count in (0, 1, 2, 4):
            reset(base)
            time.sleep(1.1)  # the bucket fills again
            with cluster(folder / f"rpm{count}", count) as workers:
                sub = folder / f"rpm{count}"
                procs = [
                    owner(
                        sub,
                        spec_file(sub, n, base, items, rpm=rpm, concurrency=32),
                        workers.url,
                        distributed=count > 0,
                    )
                    for n in ("a", "b")
                ]
                sending = sending_time(base, procs)
                for proc in procs:
                    finished(proc)
            s = stats(base)
            rate = s["successes"] / sending
            where = "in process" if count == 0 else f"{count} worker{'s' * (count > 1)}"
            share = s["rate_limited"] / max(s["attempts"], 1)
            print(
                f"{where:<12} {rate:>7.1f} {rate / (rpm / 60):>9.2f} "
                f"{s['rate_limited']:>6} {share:>9.1%}"
            )


def burst_scenario(folder: Path, rpm: int, burst_s: float, items: int) -> None:
    held = rpm / 60 * burst_s
    best = max(items - held, 0) / (rpm / 60)
    print(f"\nburst: one owner x {items} items, fakellm --rpm {rpm} --burst-s {burst_s:g}")
    print(f"(the best: {held:.0f} at once, then {rpm / 60:.0f}/s: {best:.1f} s of sending)")
    print(f"{'where':<12} {'sending s':>9} {'of best':>8} {'vs in-process':>14} {'429s':>6}")
    with fakellm("--rpm", str(rpm), "--burst-s", f"{burst_s:g}") as base:
        baseline = None
        for count in (0, 2):
            reset(base)  # a full bucket again, as a provider's after a quiet spell
            sub = folder / f"burst{count}"
            with cluster(sub, count) as workers:
                spec = spec_file(sub, "burst", base, items, concurrency=64)
                procs = [owner(sub, spec, workers.url, distributed=count > 0)]
                sending = sending_time(base, procs)
                finished(procs[0])
            s = stats(base)
            baseline = baseline or sending
            where = "in process" if count == 0 else f"{count} workers"
            print(
                f"{where:<12} {sending:>9.1f} {best / sending:>8.2f} "
                f"{baseline / sending:>14.2f} {s['rate_limited']:>6}"
            )


def latency_scenario(folder: Path, items: int) -> None:
    print(f"\nlatency: one owner x {items} items, 200 ms answers, no limits, concurrency 400")
    print(f"{'where':<12} {'wall s':>7} {'items/s':>8} {'vs in-process':>14}")
    with fakellm("--latency-ms", "200") as base:
        baseline = None
        for count in (0, 1, 2, 4):
            reset(base)
            with cluster(folder / f"lat{count}", count) as workers:
                sub = folder / f"lat{count}"
                spec = spec_file(sub, "lat", base, items, concurrency=400)
                wall = finished(owner(sub, spec, workers.url, distributed=count > 0))
            rate = items / wall
            baseline = baseline or rate
            where = "in process" if count == 0 else f"{count} worker{'s' * (count > 1)}"
            print(f"{where:<12} {wall:>7.1f} {rate:>8.0f} {rate / baseline:>14.2f}")


def kill_scenario(folder: Path, items: int) -> None:
    print(f"\nkill: 2 workers, {items} items, 200 ms; a worker killed at 30%, the owner at 60%")
    with fakellm("--latency-ms", "200") as base, cluster(folder / "kill", 2) as workers:
        sub = folder / "kill"
        db = str(sub / "kill.duckdb")
        proc = owner(
            sub,
            spec_file(sub, "kill", base, items, concurrency=64),
            workers.url,
            distributed=True,
            db=db,
        )
        while stats(base)["successes"] < 0.3 * items:
            time.sleep(0.02)
        workers.kill(0)
        while stats(base)["successes"] < 0.6 * items:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with duckdb.connect(db, read_only=True) as conn:
            (run_id,) = conn.execute("SELECT run_id FROM runs").fetchone() or ("",)
        env = {**os.environ, "PROMPTLAB_BROKER_URL": workers.url}
        resumed = subprocess.run(
            [sys.executable, "-m", "promptlab", "--db", db, "resume", run_id, "--quiet"],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        with duckdb.connect(db, read_only=True) as conn:
            rows, keys = conn.execute(
                "SELECT count(*), count(DISTINCT idempotency_key) FROM results "
                "WHERE run_id = ? AND status = 'succeeded'",
                [run_id],
            ).fetchone() or (0, 0)
        s = stats(base)
    print(
        f"resume exit {resumed.returncode}; succeeded rows {rows} for {keys} distinct items "
        f"of {items}; fakellm answered {s['successes']} requests, "
        f"{s['duplicate_completions']} of them a second time "
        f"({s['completed_twice']} items)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="rpm,burst,latency,kill")
    parser.add_argument("--items", type=int, default=300, help="per owner in `rpm`")
    parser.add_argument("--rpm", type=int, default=1200)
    parser.add_argument("--burst-items", type=int, default=2000)
    parser.add_argument("--latency-items", type=int, default=3000)
    parser.add_argument("--kill-items", type=int, default=1000)
    args = parser.parse_args()
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="promptlab-bench-") as tmp:
        folder = Path(tmp)
        subs = ("rpm0", "rpm1", "rpm2", "rpm4", "burst0", "burst2", "lat0", "lat1", "lat2", "lat4")
        for sub in (*subs, "kill"):
            (folder / sub).mkdir()
        if "rpm" in only:
            rpm_scenario(folder, args.rpm, args.items)
        if "burst" in only:
            burst_scenario(folder, 3000, 10.0, args.burst_items)
        if "latency" in only:
            latency_scenario(folder, args.latency_items)
        if "kill" in only:
            kill_scenario(folder, args.kill_items)


if __name__ == "__main__":
    main()
