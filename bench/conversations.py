"""Replaying a conversation log, `history: logged` beside `history: generated`: time,
requests and peak memory as the log grows tenfold.

    PYTHONPATH=. .venv/bin/python bench/conversations.py [--sessions 10000] [--turns 10]
        [--history logged|generated|both]

Writes a log of SESSIONS sessions of TURNS user turns each (every user message answered
by an assistant one), imports it, and replays it through one inline version on the
simulated model answering at once (a providers file with `latency_scale: 0` and no
rate limit to speak of), each
size and history in a fresh process. It prints, for a tenth of the sessions and for all
of them: requests, seconds, requests/s, and the growth of the process's peak RSS over
what it had after the import; then the ratios: the tenfold log against the small one,
and generated history against logged (its turns wait for the one before: the price of
the ordering). Memory is bounded when the tenfold log does not take ten times the
memory: the replay holds one session's messages at a time, the engine a few thousand
items, and a generated replay a session's answers only until its last turn ends. Not a
test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PROVIDERS = (
    "endpoints:\n  sim:\n    kind: sim\n    latency_scale: 0\n    rpm: 6000000\n"
    "    concurrency: 64\n"
)


def write_log(path: Path, sessions: int, turns: int) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["session_id", "turn", "role", "content"])
        for s in range(sessions):
            for t in range(turns):
                writer.writerow([f"s{s}", 2 * t, "user", f"Question {t} about order {s}?"])
                writer.writerow([f"s{s}", 2 * t + 1, "assistant", f"Answer {t} for order {s}."])


def replay(db: Path, log: Path, sessions: int, history: str) -> dict[str, Any]:
    """In this process: import the log, then replay it; figures of the replay."""
    from promptlab.config import Settings
    from promptlab.records.datasets import DEFAULT_CONVERSATION
    from promptlab.workbench import Workbench

    with Workbench.open(Settings.from_env().with_db(db)) as wb:
        wb.datasets.import_file(log, "log", conversation=DEFAULT_CONVERSATION)
        spec = wb.runs.spec_from_data({
            "name": "replay", "dataset": "log", "history": history,
            "variants": [{"model": "sim:fast", "params": {"max_tokens": 16}, "messages": [
                {"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": "{{ content }}"}]}],
        })  # fmt: skip
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        run_id = wb.runs.start(spec)
        progress = wb.runs.wait(run_id)
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        per_session = wb.analysis.sessions(run_id)
    assert progress.status == "completed", progress.status
    return {
        "history": history, "sessions": sessions, "requests": progress.succeeded,
        "seconds": seconds,
        "completed_sessions": per_session[0].completed, "rss_growth_mb": (peak - base) / 1024,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--history", choices=("logged", "generated", "both"), default="both")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        db, log, sessions, history = args.one
        print(json.dumps(replay(Path(db), Path(log), int(sessions), history)))
        return
    modes = ("logged", "generated") if args.history == "both" else (args.history,)
    figures: dict[tuple[str, int], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        providers = Path(folder) / "providers.yaml"
        providers.write_text(PROVIDERS, encoding="utf-8")
        env = {"PROMPTLAB_PROVIDERS": str(providers), "PROMPTLAB_DEMO": "0",
               "PROMPTLAB_AUDIT": "1", "PYTHONPATH": str(REPO_ROOT)}  # fmt: skip
        sizes = (args.sessions // 10, args.sessions)
        for sessions in sizes:
            log = Path(folder) / f"log-{sessions}.csv"
            write_log(log, sessions, args.turns)
            for history in modes:
                db = Path(folder) / f"replay-{history}-{sessions}.duckdb"
                out = subprocess.run(
                    [sys.executable, __file__, "--one", str(db), str(log), str(sessions), history],
                    check=True, capture_output=True, text=True, env={**os.environ, **env},
                )  # fmt: skip
                figures[history, sessions] = json.loads(out.stdout.strip().splitlines()[-1])
    for f in figures.values():
        print(f"{f['history']:>9}: {int(f['sessions']):>6} sessions x {args.turns} turns: "
              f"{int(f['requests']):>7} requests in {f['seconds']:6.1f} s "
              f"({f['requests'] / f['seconds']:6.0f}/s), {int(f['completed_sessions'])} "
              f"sessions completed, peak RSS +{f['rss_growth_mb']:.0f} MB")  # fmt: skip
    small_n, large_n = sizes
    for history in modes:
        small, large = figures[history, small_n], figures[history, large_n]
        print(
            f"{history:>9}, tenfold log: {large['seconds'] / small['seconds']:.1f}x the time, "
            f"{large['rss_growth_mb'] / max(small['rss_growth_mb'], 1):.1f}x the memory growth"
        )
    if len(modes) == 2:
        for n in sizes:
            logged, generated = figures["logged", n], figures["generated", n]
            print(f"generated / logged at {n} sessions: "
                  f"{generated['seconds'] / logged['seconds']:.2f}x the time, "
                  f"{generated['rss_growth_mb'] / max(logged['rss_growth_mb'], 1):.2f}x the "
                  "memory growth")  # fmt: skip


if __name__ == "__main__":
    main()
